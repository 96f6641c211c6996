#pragma once
// Chat prompts written by a model's own Jinja template (core/jinja), the way transformers'
// apply_chat_template and vLLM call it: the variables messages, tools (null), documents (null),
// add_generation_prompt, bos_token and eos_token (the vocabulary's texts), plus any extra ones
// (vLLM's chat_template_kwargs, e.g. {"enable_thinking": false}, and a request's `tools`).
// Each message is role and content, and what it carries beside them: an assistant's reasoning
// (as reasoning, reasoning_content and thinking), tool_calls, a tool message's tool_call_id.
//
// Text the user typed must not become special tokens (core/chat/chat_tokens.h). A Jinja
// template is one string, so before rendering, every spelling of a control token in a user,
// system or tool message is swapped for a placeholder (private-use characters around a number);
// the rendered text is then cut at the placeholders, which become content pieces holding the
// spelling again (tokenized as plain text), and the rest is template text. Templates that test
// or transform the content still see everything else as written. Assistant messages are left
// as they are: templates split them on reasoning markers such as </think>.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "model/tokenizer.h"

namespace kvscope {

struct ChatTemplateChoice;

// Extra template variables: an object (null: none).
using ChatTemplateVars = nlohmann::ordered_json;

struct ChatRendered {
  std::string text;                  // as rendered, with the placeholders in it
  std::vector<std::string> spelled;  // placeholder k stands for spelled[k]
};

// Renders `messages` through choice.jinja. Throws ChatTemplateError carrying the template's
// own message (a raise_exception, an unsupported feature, a limit).
ChatRendered render_chat_jinja(const ChatTemplateChoice& choice, const Tokenizer& tok,
                               const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const ChatTemplateVars& extra = nullptr);
// The pieces of r.text from byte `from` on: template text, and a content piece per placeholder.
std::vector<ChatPiece> chat_rendered_pieces(const ChatRendered& r, size_t from = 0);
// The whole prompt as token ids, llama.cpp's way: BOS when the vocabulary adds it (and then a
// bos_token the template wrote itself is not doubled), then the pieces (chat_tokens.h).
std::vector<TokenId> tokenize_chat_rendered(const Tokenizer& tok, const ChatTemplateChoice& choice,
                                            const ChatRendered& r);
}  // namespace kvscope
