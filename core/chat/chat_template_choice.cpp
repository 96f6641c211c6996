#include "chat/chat_template_choice.h"

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

}  // namespace

std::string ChatTemplateChoice::describe() const { return std::string(chat_template_name(kind)) + " (" + origin + ")"; }

ChatTemplateChoice choose_chat_template(const GgufFile& file, const Tokenizer& tok, std::string_view requested) {
  ChatTemplateChoice c;
  if (!requested.empty()) {
    const auto kind = detect_chat_template(requested);
    if (!kind)
      throw ChatTemplateError("chat template '" + excerpt(requested) + "' is neither a template name (" + name_list() +
                              ") nor a template text of one of these families");
    c.kind = *kind;
    c.origin = chat_template_from_name(requested) ? "chosen by name" : "recognised in the given template text";
  } else {
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
    if (!kind) {
      c.origin = "fallback";
      c.warning = "tokenizer.chat_template ('" + excerpt(text) + "') matches none of the built-in templates (" +
                  name_list() + "); using plain text continuation. Choose one with --chat-template NAME";
      return c;
    }
    c.kind = *kind;
    c.origin = "detected in tokenizer.chat_template";
  }
  c.warning = marker_warning(c.kind, tok);
  return c;
}

}  // namespace kvscope
