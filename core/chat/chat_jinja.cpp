#include "chat/chat_jinja.h"

#include <algorithm>
#include <set>

#include "chat/chat_template_choice.h"
#include "chat/chat_tokens.h"
#include "jinja/error.h"
#include "jinja/template.h"

namespace kvscope {
namespace {

using ojson = nlohmann::ordered_json;

// U+E000 and U+E001 (private use) around the placeholder's number.
constexpr std::string_view kOpen = "\xEE\x80\x80";
constexpr std::string_view kClose = "\xEE\x80\x81";

// The control tokens `text` spells, longest first (so that a longer spelling wins).
std::vector<std::string> control_spellings(const Tokenizer& tok, const std::string& text) {
  std::set<std::string> found;
  for (TokenId id : tok.encode(text, false, true))
    if (tok.token_type(id) == TokenType::Control) found.insert(tok.token_text(id));
  std::vector<std::string> out(found.begin(), found.end());
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return out;
}

// `text` with each spelling of a control token replaced by a placeholder (recorded in `spelled`).
std::string protect(const Tokenizer& tok, const std::string& text, std::vector<std::string>& spelled) {
  const std::vector<std::string> specials = control_spellings(tok, text);
  if (specials.empty()) return text;
  std::string out;
  for (size_t i = 0; i < text.size();) {
    auto hit = std::find_if(specials.begin(), specials.end(),
                            [&](const std::string& s) { return text.compare(i, s.size(), s) == 0; });
    if (hit == specials.end()) {
      out += text[i++];
      continue;
    }
    out += std::string(kOpen) + std::to_string(spelled.size()) + std::string(kClose);
    spelled.push_back(*hit);
    i += hit->size();
  }
  return out;
}

std::string vocab_text(const Tokenizer& tok, TokenId id) {
  return id >= 0 && id < tok.n_vocab() ? tok.token_text(id) : std::string();
}

// A message as vLLM hands it to the template: role and content, then the assistant's
// tool_calls and reasoning, a tool message's tool_call_id, a name; reasoning also under
// gpt-oss's name for it (`thinking`), as llama.cpp and transformers' users pass it.
ojson message_json(const Tokenizer& tok, const ChatMessage& m, std::vector<std::string>& spelled) {
  ojson j = {{"role", m.role}, {"content", m.role == "assistant" ? m.content : protect(tok, m.content, spelled)}};
  if (m.fields.is_object())
    for (const auto& [k, v] : m.fields.items())
      if (k != "role" && k != "content") j[k] = v;
  if (m.reasoning) {
    j["reasoning"] = *m.reasoning;
    j["reasoning_content"] = *m.reasoning;
    j["thinking"] = *m.reasoning;
  }
  return j;
}

}  // namespace

ChatRendered render_chat_jinja(const ChatTemplateChoice& choice, const Tokenizer& tok,
                               const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const ChatTemplateVars& extra) {
  ChatRendered r;
  ojson msgs = ojson::array();
  for (const ChatMessage& m : messages) msgs.push_back(message_json(tok, m, r.spelled));
  ojson vars = {{"messages", std::move(msgs)},
                {"tools", nullptr},
                {"documents", nullptr},
                {"add_generation_prompt", add_generation_prompt}};
  if (!choice.bos_text.empty()) vars["bos_token"] = choice.bos_text;
  if (!choice.eos_text.empty()) vars["eos_token"] = choice.eos_text;
  if (extra.is_object())
    for (const auto& [k, v] : extra.items()) vars[k] = v;
  try {
    r.text = jinja::render(choice.jinja, vars);
  } catch (const jinja::Error& e) { throw ChatTemplateError(std::string("the chat template failed: ") + e.what()); }
  return r;
}

std::vector<ChatPiece> chat_rendered_pieces(const ChatRendered& r, size_t from) {
  std::vector<ChatPiece> out;
  auto add = [&](ChatPiece::Kind k, std::string_view t) {
    if (t.empty()) return;
    if (k == ChatPiece::Kind::Template && !out.empty() && out.back().kind == k)
      out.back().text += t;
    else
      out.push_back({k, std::string(t)});
  };
  const std::string_view text = std::string_view(r.text).substr(std::min(from, r.text.size()));
  size_t i = 0;
  while (i < text.size()) {
    const size_t open = text.find(kOpen, i);
    if (open == std::string_view::npos) break;
    add(ChatPiece::Kind::Template, text.substr(i, open - i));
    size_t j = open + kOpen.size(), k = 0;
    bool digits = false;
    while (j < text.size() && text[j] >= '0' && text[j] <= '9' && k < r.spelled.size()) {
      k = k * 10 + static_cast<size_t>(text[j++] - '0');
      digits = true;
    }
    if (digits && k < r.spelled.size() && text.compare(j, kClose.size(), kClose) == 0) {
      add(ChatPiece::Kind::Content, r.spelled[k]);
      i = j + kClose.size();
    } else {  // not one of ours (the user typed U+E000): plain text, which never spells a token
      add(ChatPiece::Kind::Template, kOpen);
      i = open + kOpen.size();
    }
  }
  add(ChatPiece::Kind::Template, text.substr(std::min(i, text.size())));
  return out;
}

std::vector<TokenId> tokenize_chat_rendered(const Tokenizer& tok, const ChatTemplateChoice& choice,
                                            const ChatRendered& r) {
  std::vector<TokenId> out;
  size_t from = 0;
  if (tok.add_bos() && tok.bos() >= 0) {
    out.push_back(tok.bos());
    const std::string bos = choice.bos_text.empty() ? vocab_text(tok, tok.bos()) : choice.bos_text;
    if (!bos.empty() && r.text.compare(0, bos.size(), bos) == 0) from = bos.size();
  }
  const std::vector<TokenId> ids = tokenize_chat_pieces(tok, chat_rendered_pieces(r, from), -1);
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

}  // namespace kvscope
