#pragma once
// Which chat template a model is talked to with: an explicit choice (a name or template text),
// else the family recognised in the file's tokenizer.chat_template, else plain completion.
// A template we cannot recognise is not fatal: the choice falls back to completion and carries
// a warning that names the problem, so a CLI or GUI can say so and keep running.
#include <string>
#include <string_view>

#include "chat/chat_template.h"

namespace kvscope {

class GgufFile;
class Tokenizer;

struct ChatTemplateChoice {
  ChatTemplateKind kind = ChatTemplateKind::Completion;
  std::string origin;            // why this one: "detected in tokenizer.chat_template", "--chat-template", ...
  std::string warning;           // non-empty: a fallback happened or the vocabulary lacks the markers
  std::string describe() const;  // "chatml (detected in tokenizer.chat_template)"
};

// requested: "" to follow the model; else a template name or a template's text. Throws
// ChatTemplateError when `requested` is neither a name nor a recognisable template text.
ChatTemplateChoice choose_chat_template(const GgufFile& file, const Tokenizer& tok, std::string_view requested);

}  // namespace kvscope
