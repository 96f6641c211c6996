#include "chat/chat_template_choice.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_jinja.h"
#include "chat/chat_tokens.h"
#include "gguf/gguf_file.h"
#include "model/tokenizer.h"

namespace kvscope {
namespace {

std::string name_list() {
  std::string s;
  for (const std::string& n : chat_template_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string excerpt(std::string_view t) {
  std::string s(t.substr(0, 60));
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return t.size() > 60 ? s + "..." : s;
}

// Markers the vocabulary cannot spell as special tokens would be fed to the model as plain
// text: it still runs, but not as the template means, so say so.
std::string marker_warning(ChatTemplateKind k, const Tokenizer& tok) {
  std::string missing;
  for (std::string_view m : chat_template_markers(k))
    if (!is_special_token(tok, tok.find_token(m))) missing += (missing.empty() ? "" : ", ") + std::string(m);
  if (missing.empty()) return "";
  return std::string("template ") + chat_template_name(k) + ": the vocabulary has no special token " + missing +
         ", so it is fed as plain text";
}

// The model's BOS and EOS token texts, as transformers passes bos_token and eos_token.
void set_special_texts(ChatTemplateChoice& c, const Tokenizer& tok) {
  if (tok.bos() >= 0 && tok.bos() < tok.n_vocab()) c.bos_text = tok.token_text(tok.bos());
  if (tok.eos() >= 0 && tok.eos() < tok.n_vocab()) c.eos_text = tok.token_text(tok.eos());
}

// A one-message conversation through the Jinja template: "" when it renders, else why not.
std::string probe(const ChatTemplateChoice& c, const Tokenizer& tok) {
  try {
    render_chat_jinja(c, tok, {{"user", "Hello"}}, true);
    return "";
  } catch (const ChatTemplateError& e) { return e.what(); }
}

bool looks_like_jinja(std::string_view t) {
  return t.find("{{") != std::string_view::npos || t.find("{%") != std::string_view::npos;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ChatTemplateError("cannot read the chat template file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --chat-template NAME, FILE or template text.
ChatTemplateChoice requested_template(const Tokenizer& tok, std::string_view requested) {
  ChatTemplateChoice c;
  if (const auto named = chat_template_from_name(requested)) {
    c.kind = *named;
    c.origin = "chosen by name";
    c.warning = marker_warning(c.kind, tok);
    return c;
  }
  std::error_code ec;
  const std::string req(requested);
  const bool is_file = requested.size() < 4096 && std::filesystem::is_regular_file(req, ec);
  if (is_file || looks_like_jinja(requested)) {
    c.jinja = is_file ? read_text_file(req) : req;
    if (c.jinja.empty()) throw ChatTemplateError("the chat template file " + req + " is empty");
    c.kind = detect_chat_template(c.jinja).value_or(ChatTemplateKind::Completion);
    c.origin = is_file ? "Jinja, from " + req : "Jinja, the given template text";
    set_special_texts(c, tok);
    if (const std::string why = probe(c, tok); !why.empty())
      throw ChatTemplateError("chat template " + (is_file ? req : "'" + excerpt(requested) + "'") +
                              " cannot render a one-message conversation: " + why);
    return c;
  }
  const auto kind = detect_chat_template(requested);
  if (!kind)
    throw ChatTemplateError("chat template '" + excerpt(requested) + "' is neither a template name (" + name_list() +
                            "), a template file, nor a template text of one of these families");
  c.kind = *kind;
  c.origin = "recognised in the given template text";
  c.warning = marker_warning(c.kind, tok);
  return c;
}

}  // namespace

std::string ChatTemplateChoice::describe() const {
  if (uses_jinja()) return "jinja (" + origin + "; built-in fallback: " + std::string(chat_template_name(kind)) + ")";
  return std::string(chat_template_name(kind)) + " (" + origin + ")";
}

namespace {

ChatTemplateChoice template_of(const GgufFile& file, const Tokenizer& tok, std::string_view requested) {
  if (!requested.empty()) return requested_template(tok, requested);
  ChatTemplateChoice c;
  const GgufValue* v = file.find("tokenizer.chat_template");
  if (!v) {
    c.origin = "the model file has no tokenizer.chat_template: plain text continuation";
    return c;
  }
  if (v->type != GgufValueType::STRING) {
    c.origin = "fallback";
    c.warning = "tokenizer.chat_template is not a string; using plain text continuation";
    return c;
  }
  const std::string& text = v->as_string();
  const auto kind = detect_chat_template(text);
  c.kind = kind.value_or(ChatTemplateKind::Completion);
  c.jinja = text;
  set_special_texts(c, tok);
  if (const std::string why = text.empty() ? "the template is empty" : probe(c, tok); !why.empty()) {
    // The model's own template is unusable here: the built-in family (or plain text) instead.
    c.jinja.clear();
    c.origin = kind ? "detected in tokenizer.chat_template" : "fallback";
    c.warning = "tokenizer.chat_template ('" + excerpt(text) + "') cannot be rendered: " + why +
                "; using the built-in " + chat_template_name(c.kind) + " template" +
                (kind ? "" : " (plain text continuation). Choose one with --chat-template NAME|FILE");
    if (const std::string m = marker_warning(c.kind, tok); kind && !m.empty()) c.warning += "; " + m;
    return c;
  }
  c.origin = "the model's tokenizer.chat_template";
  return c;
}

}  // namespace

ChatTemplateChoice choose_chat_template(const GgufFile& file, const Tokenizer& tok, std::string_view requested) {
  ChatTemplateChoice c = template_of(file, tok, requested);
  c.reasoning = detect_reasoning_format(tok);
  return c;
}

}  // namespace kvscope
