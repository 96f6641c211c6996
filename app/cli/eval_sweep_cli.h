#pragma once
// `kvscope-cli eval --sweep AXIS=V1,V2 ...`: the grid runner's command-line side (cmd_eval.cpp
// parses the common options and hands over here).
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/engine_options.h"
#include "run/perplexity.h"

namespace kvscope::cli {

// Runs the sweep (and --recompute-window, if given) and writes its JSON to --out (or stdout).
int run_eval_sweep(const Args& a, const LoadedModel& lm, const std::vector<TokenId>& tokens, const EvalConfig& base,
                   size_t text_tokens);

}  // namespace kvscope::cli
