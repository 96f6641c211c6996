#pragma once
// Which chat template a model is talked to with: an explicit choice (a built-in family's name,
// or a Jinja template file), else the model's own tokenizer.chat_template rendered by the Jinja
// engine (core/jinja), else plain completion. The built-in family recognised in the template
// text stays as the fallback: it writes the turns when the Jinja template cannot render (a
// template the engine does not support, or one that raises). A template we cannot use is not
// fatal for the model's own: the choice falls back and carries a warning that names the
// problem, so a CLI or GUI can say so and keep running.
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "chat/reasoning_parser.h"

namespace kvscope {

class GgufFile;
class Tokenizer;

struct ChatTemplateChoice {
  // The built-in family: what writes the turns when `jinja` is empty, and the fallback when a
  // Jinja render fails (recognised in the template text; completion when nothing matches).
  ChatTemplateKind kind = ChatTemplateKind::Completion;
  std::string jinja;     // the Jinja template's source; empty: the built-in family writes the turns
  std::string bos_text;  // bos_token and eos_token as the template sees them ("" when none)
  std::string eos_text;
  std::string origin;   // why this one: "detected in tokenizer.chat_template", "--chat-template", ...
  std::string warning;  // non-empty: a fallback happened or the vocabulary lacks the markers
  // How replies split into reasoning and content (read from the vocabulary; --reasoning-parser
  // overrides it).
  ReasoningFormat reasoning = ReasoningFormat::None;
  bool uses_jinja() const { return !jinja.empty(); }
  std::string describe() const;  // "chatml (detected ...)", "jinja (the model's tokenizer.chat_template; ...)"
};

// requested: "" to follow the model; else a built-in template's name, a Jinja template file, or
// a template's text (Jinja when it has {{ or {%; else recognised by family). Throws
// ChatTemplateError when `requested` is none of these, or when a requested Jinja template
// cannot render a one-message conversation (the template's own message is quoted).
ChatTemplateChoice choose_chat_template(const GgufFile& file, const Tokenizer& tok, std::string_view requested);

}  // namespace kvscope
