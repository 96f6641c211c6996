#pragma once
// Built-in chat templates, recognised from the text of a model's tokenizer.chat_template the way
// llama.cpp's llm_chat_detect_template does (marker strings, not a Jinja interpreter), and
// rendered to the exact strings those templates produce.
//
// Why not Jinja: the templates of the families we support are a few fixed string patterns; a
// Jinja subset big enough for real templates (loops, slicing, filters, raise_exception, namespace)
// is a project of its own and would still be wrong on the next template. A recognised family is
// rendered by code we test against the exact strings; an unrecognised one is reported by name.
//
// The rendered text never contains BOS: like llama.cpp, the tokenizer adds it when the model's
// tokenizer.ggml.add_bos_token says so (Llama 3's <|begin_of_text|>, Gemma's <bos>, ...).
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvscope {

enum class ChatTemplateKind {
  Completion,       // no template: the turns are plain text joined by spaces (base models)
  ChatML,           // <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM, OpenHermes, ...)
  Llama3,           // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  Gemma,            // <start_of_turn>user\n...<end_of_turn>\n, "model" role, system folded into turn 1
  Phi3,             // <|user|>\n...<|end|>\n<|assistant|>\n
  MistralV1,        //  [INST] ... [/INST] reply</s>  (leading spaces, SPM vocab)
  MistralV3,        // [INST] ...[/INST] reply</s>   (control-token [INST])
  MistralV3Tekken,  // [INST]...[/INST]reply</s>
  MistralV7,        // [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] reply</s>
  Llama2,           // [INST] ... [/INST]reply</s>, no system block
  Llama2Sys,        // with <<SYS>>\n...\n<</SYS>>\n\n
  Llama2SysBos,     // and <s> before every later [INST]
  Llama2SysStrip,   // and contents trimmed
};

// Thrown for a name or template text we cannot use; the message names the problem.
struct ChatTemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c, std::optional<std::string> thought = std::nullopt)
      : role(std::move(r)), content(std::move(c)), reasoning(std::move(thought)) {}

  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // An assistant's reasoning (absent: none given). A Jinja template sees it as `reasoning` and
  // `reasoning_content` (vLLM's names; Qwen3 reads the latter) and `thinking` (gpt-oss's);
  // the built-in families drop it, as templates drop earlier turns' reasoning.
  std::optional<std::string> reasoning;
  // Further fields a Jinja template sees as given (an object; null: none): an assistant's
  // tool_calls, a tool message's tool_call_id, a message's name.
  nlohmann::ordered_json fields;
};

// One piece of rendered text. Template text may spell special tokens (and must: "<|im_start|>"
// has to become that token); user and assistant contents must not, so they stay separate pieces
// until tokenization (see chat_tokens.h).
struct ChatPiece {
  enum class Kind { Template, Content, Reply };  // Reply: an assistant message's content
  Kind kind = Kind::Template;
  std::string text;
};

const char* chat_template_name(ChatTemplateKind k);  // "chatml", "llama3", ...
std::vector<std::string> chat_template_names();      // every name, for help texts
std::optional<ChatTemplateKind> chat_template_from_name(std::string_view name);
// The family a tokenizer.chat_template text belongs to; a bare name is accepted too. nullopt
// when no family matches (including families we know but do not render, e.g. Phi-4).
std::optional<ChatTemplateKind> detect_chat_template(std::string_view template_text);

// The text of the token that ends an assistant turn ("<|im_end|>"), or "" when it is the EOS.
std::string_view chat_end_of_turn_text(ChatTemplateKind k);
// Special tokens the template's markers need; a vocabulary without them cannot chat in it.
std::vector<std::string_view> chat_template_markers(ChatTemplateKind k);

// Renders messages; add_generation_prompt appends the opening of the assistant's reply.
// Throws ChatTemplateError for an unknown role.
std::vector<ChatPiece> render_chat(ChatTemplateKind k, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt);
std::string render_chat_text(ChatTemplateKind k, const std::vector<ChatMessage>& messages,
                             bool add_generation_prompt);  // the pieces joined

}  // namespace kvscope
