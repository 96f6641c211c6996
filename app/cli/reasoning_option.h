#pragma once
// --reasoning-parser, shared by `chat` and `serve`: how replies split into reasoning and content
// (core/chat/reasoning_parser.h). auto (the default) follows the vocabulary: <think> tokens mean
// think blocks, gpt-oss's <|channel|> harmony; none turns the split off; think or harmony (or
// vLLM's names: qwen3, deepseek_r1, openai_gptoss) force one.
#include <string>

#include "cli/args.h"
#include "chat/chat_template_choice.h"

namespace kvscope::cli {

// Sets c.reasoning from the option (untouched for auto). Throws UsageError for an unknown name.
void apply_reasoning_option(const Args& a, ChatTemplateChoice& c);
// "think (the vocabulary has <think> and </think>)", "none (...)", for the start-up lines.
std::string describe_reasoning(const Args& a, const ChatTemplateChoice& c);

}  // namespace kvscope::cli
