// Built-in chat templates: names, detection from template text, rendering. The strings follow
// the families' published templates as llama.cpp renders them (llama-chat.cpp); the tests in
// tests/core/chat/test_chat_template.cpp pin every family's exact output.
#include "chat/chat_template.h"

#include <array>
#include <cctype>
#include <utility>

namespace kvscope {
namespace {

using K = ChatTemplateKind;
using Kind = ChatPiece::Kind;

constexpr std::array<std::pair<K, const char*>, 13> kNames = {{
    {K::Completion, "completion"},
    {K::ChatML, "chatml"},
    {K::Llama3, "llama3"},
    {K::Gemma, "gemma"},
    {K::Phi3, "phi3"},
    {K::MistralV1, "mistral-v1"},
    {K::MistralV3, "mistral-v3"},
    {K::MistralV3Tekken, "mistral-v3-tekken"},
    {K::MistralV7, "mistral-v7"},
    {K::Llama2, "llama2"},
    {K::Llama2Sys, "llama2-sys"},
    {K::Llama2SysBos, "llama2-sys-bos"},
    {K::Llama2SysStrip, "llama2-sys-strip"},
}};

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Collects pieces, merging neighbours of the same kind so the output stays short to read.
class PieceWriter {
 public:
  PieceWriter& tmpl(std::string_view t) { return add(Kind::Template, t); }
  PieceWriter& content(std::string_view t) { return add(Kind::Content, t); }
  PieceWriter& reply(std::string_view t) {
    // A reply is always its own piece (even when empty): the conversation code finds "what
    // follows the last reply" by its position.
    pieces_.push_back({Kind::Reply, std::string(t)});
    return *this;
  }
  std::vector<ChatPiece> take() { return std::move(pieces_); }

 private:
  PieceWriter& add(Kind k, std::string_view t) {
    if (t.empty()) return *this;
    if (!pieces_.empty() && pieces_.back().kind == k && k != Kind::Reply)
      pieces_.back().text += t;
    else
      pieces_.push_back({k, std::string(t)});
    return *this;
  }
  std::vector<ChatPiece> pieces_;
};

void check_roles(const std::vector<ChatMessage>& messages) {
  for (const ChatMessage& m : messages)
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      throw ChatTemplateError("chat message role '" + m.role + "' is not one of system, user, assistant");
}

void render_completion(const std::vector<ChatMessage>& msgs, PieceWriter& w) {
  // Plain continuation for base models: a space between turns (a newline after a system text).
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i > 0) w.tmpl(msgs[i - 1].role == "system" ? "\n" : " ");
    if (msgs[i].role == "assistant")
      w.reply(msgs[i].content);
    else
      w.content(msgs[i].content);
  }
}

void render_chatml(const std::vector<ChatMessage>& msgs, bool gen, PieceWriter& w) {
  for (const ChatMessage& m : msgs) {
    w.tmpl("<|im_start|>" + m.role + "\n");
    if (m.role == "assistant")
      w.reply(m.content);
    else
      w.content(m.content);
    w.tmpl("<|im_end|>\n");
  }
  if (gen) w.tmpl("<|im_start|>assistant\n");
}

void render_llama3(const std::vector<ChatMessage>& msgs, bool gen, PieceWriter& w) {
  for (const ChatMessage& m : msgs) {
    w.tmpl("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
    if (m.role == "assistant")
      w.reply(trim(m.content));
    else
      w.content(trim(m.content));
    w.tmpl("<|eot_id|>");
  }
  if (gen) w.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void render_gemma(const std::vector<ChatMessage>& msgs, bool gen, PieceWriter& w) {
  // Gemma has no system role: the system text opens the first user turn.
  std::string system;
  for (const ChatMessage& m : msgs) {
    if (m.role == "system") {
      system += trim(m.content);
      continue;
    }
    const bool model = m.role == "assistant";
    w.tmpl(model ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
    if (!system.empty() && !model) {
      w.content(system).tmpl("\n\n");
      system.clear();
    }
    if (model)
      w.reply(trim(m.content));
    else
      w.content(trim(m.content));
    w.tmpl("<end_of_turn>\n");
  }
  if (gen) w.tmpl("<start_of_turn>model\n");
}

void render_phi3(const std::vector<ChatMessage>& msgs, bool gen, PieceWriter& w) {
  for (const ChatMessage& m : msgs) {
    w.tmpl("<|" + m.role + "|>\n");
    if (m.role == "assistant")
      w.reply(m.content);
    else
      w.content(m.content);
    w.tmpl("<|end|>\n");
  }
  if (gen) w.tmpl("<|assistant|>\n");
}

// Mistral's templates have no generation prompt: the prompt ends with [/INST] and the reply's
// leading space (v1, v3) is the first generated token's.
void render_mistral(K k, const std::vector<ChatMessage>& msgs, PieceWriter& w) {
  const std::string lead = k == K::MistralV1 ? " " : "";
  const std::string trail = k == K::MistralV3Tekken ? "" : " ";
  bool inside = false;
  for (const ChatMessage& m : msgs) {
    if (!inside) {
      w.tmpl(lead + "[INST]" + trail);
      inside = true;
    }
    if (m.role == "system") {
      w.content(m.content).tmpl("\n\n");
    } else if (m.role == "user") {
      w.content(m.content).tmpl(lead + "[/INST]");
    } else {
      w.tmpl(trail).reply(k == K::MistralV3 ? trim(m.content) : m.content).tmpl("</s>");
      inside = false;
    }
  }
}

void render_mistral_v7(const std::vector<ChatMessage>& msgs, PieceWriter& w) {
  for (const ChatMessage& m : msgs) {
    if (m.role == "system")
      w.tmpl("[SYSTEM_PROMPT] ").content(m.content).tmpl("[/SYSTEM_PROMPT]");
    else if (m.role == "user")
      w.tmpl("[INST] ").content(m.content).tmpl("[/INST]");
    else
      w.tmpl(" ").reply(m.content).tmpl("</s>");
  }
}

void render_llama2(K k, const std::vector<ChatMessage>& msgs, PieceWriter& w) {
  const bool sys_block = k != K::Llama2;
  const bool bos_inside = k == K::Llama2SysBos;
  const bool strip = k == K::Llama2SysStrip;
  bool inside = true;  // the first [INST] follows the tokenizer's BOS
  w.tmpl("[INST] ");
  for (const ChatMessage& m : msgs) {
    const std::string content = strip ? trim(m.content) : m.content;
    if (!inside) {
      w.tmpl(bos_inside ? "<s>[INST] " : "[INST] ");
      inside = true;
    }
    if (m.role == "system") {
      if (sys_block)
        w.tmpl("<<SYS>>\n").content(content).tmpl("\n<</SYS>>\n\n");
      else
        w.content(content).tmpl("\n");  // no system block: the text still leads the turn
    } else if (m.role == "user") {
      w.content(content).tmpl(" [/INST]");
    } else {
      w.reply(content).tmpl("</s>");
      inside = false;
    }
  }
}

}  // namespace

const char* chat_template_name(ChatTemplateKind k) {
  for (const auto& [kind, name] : kNames)
    if (kind == k) return name;
  return "?";
}

std::vector<std::string> chat_template_names() {
  std::vector<std::string> out;
  for (const auto& [kind, name] : kNames) out.emplace_back(name);
  return out;
}

std::optional<ChatTemplateKind> chat_template_from_name(std::string_view name) {
  for (const auto& [kind, n] : kNames)
    if (name == n) return kind;
  return std::nullopt;
}

std::optional<ChatTemplateKind> detect_chat_template(std::string_view t) {
  if (auto named = chat_template_from_name(t)) return named;
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<|im_start|>")) {
    // Phi-4 (<|im_sep|>) and SmolVLM (<end_of_utterance>) reuse the marker but are not ChatML.
    if (has("<|im_sep|>") || has("<end_of_utterance>")) return std::nullopt;
    return K::ChatML;
  }
  if (t.rfind("mistral", 0) == 0 || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return K::MistralV7;
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return K::MistralV1;
      if (has("\"[INST]\"")) return K::MistralV3Tekken;
      return K::MistralV3;
    }
    if (has("content.strip()")) return K::Llama2SysStrip;
    if (has("bos_token + '[INST]")) return K::Llama2SysBos;
    if (has("<<SYS>>")) return K::Llama2Sys;
    return K::Llama2;
  }
  if (has("<|assistant|>") && has("<|end|>")) return K::Phi3;
  if (has("<start_of_turn>")) return K::Gemma;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return K::Llama3;
  return std::nullopt;
}

std::string_view chat_end_of_turn_text(ChatTemplateKind k) {
  switch (k) {
    case K::ChatML:
      return "<|im_end|>";
    case K::Llama3:
      return "<|eot_id|>";
    case K::Gemma:
      return "<end_of_turn>";
    case K::Phi3:
      return "<|end|>";
    default:
      return "";  // Mistral, Llama 2 and plain completion end a reply with EOS
  }
}

std::vector<std::string_view> chat_template_markers(ChatTemplateKind k) {
  switch (k) {
    case K::ChatML:
      return {"<|im_start|>", "<|im_end|>"};
    case K::Llama3:
      return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case K::Gemma:
      return {"<start_of_turn>", "<end_of_turn>"};
    case K::Phi3:
      return {"<|user|>", "<|assistant|>", "<|end|>"};
    case K::MistralV3:
    case K::MistralV3Tekken:
    case K::MistralV7:
      return {"[INST]", "[/INST]"};
    default:
      return {};  // Llama 2 and Mistral v1 spell [INST] as plain text
  }
}

std::vector<ChatPiece> render_chat(ChatTemplateKind k, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) {
  check_roles(messages);
  PieceWriter w;
  switch (k) {
    case K::Completion:
      render_completion(messages, w);
      break;
    case K::ChatML:
      render_chatml(messages, add_generation_prompt, w);
      break;
    case K::Llama3:
      render_llama3(messages, add_generation_prompt, w);
      break;
    case K::Gemma:
      render_gemma(messages, add_generation_prompt, w);
      break;
    case K::Phi3:
      render_phi3(messages, add_generation_prompt, w);
      break;
    case K::MistralV1:
    case K::MistralV3:
    case K::MistralV3Tekken:
      render_mistral(k, messages, w);
      break;
    case K::MistralV7:
      render_mistral_v7(messages, w);
      break;
    case K::Llama2:
    case K::Llama2Sys:
    case K::Llama2SysBos:
    case K::Llama2SysStrip:
      render_llama2(k, messages, w);
      break;
  }
  return w.take();
}

std::string render_chat_text(ChatTemplateKind k, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatPiece& p : render_chat(k, messages, add_generation_prompt)) out += p.text;
  return out;
}

}  // namespace kvscope
