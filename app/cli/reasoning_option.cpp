#include "cli/reasoning_option.h"

namespace kvscope::cli {

void apply_reasoning_option(const Args& a, ChatTemplateChoice& c) {
  const std::string name = a.str("reasoning-parser", "auto");
  if (name == "auto") return;
  const auto f = reasoning_format_from_name(name);
  if (!f)
    throw UsageError("--reasoning-parser '" + name +
                     "' is not one of auto, none, think, harmony (or qwen3, deepseek_r1, openai_gptoss)");
  c.reasoning = *f;
}

std::string describe_reasoning(const Args& a, const ChatTemplateChoice& c) {
  const std::string name = reasoning_format_name(c.reasoning);
  if (a.str("reasoning-parser", "auto") != "auto") return name + " (--reasoning-parser)";
  switch (c.reasoning) {
    case ReasoningFormat::Think:
      return name + " (the vocabulary has <think> and </think>)";
    case ReasoningFormat::Harmony:
      return name + " (the vocabulary has gpt-oss's <|channel|> and <|message|>)";
    case ReasoningFormat::None:
      break;
  }
  return name + " (no reasoning markers in the vocabulary)";
}

}  // namespace kvscope::cli
