#pragma once
// StreamingLLM's slow baseline, "sliding window with re-computation": to predict token i + 1,
// the last W tokens are encoded from scratch in a fresh KV cache, so no prediction sees anything
// more than W tokens back and every window starts at position 0 like a real prompt. Quality is
// what a cache of W tokens can give at best; the cost is W tokens of prefill per prediction,
// which is why only a sample of positions is scored (spread_positions).
//
// Each window is BOS followed by the last W - 1 text tokens (so it holds W tokens, the cache
// size it is compared at). The paper's windows are bare text; a model trained to always see BOS
// first (Gemma) is off-distribution without it, which would measure the missing BOS, not the
// window. Used by `kvscope-cli eval --recompute-window` and tests/test_streaming_eval.cpp.
#include <cstdint>
#include <memory>
#include <vector>

#include "run/perplexity.h"

namespace kvscope {

struct RecomputeRun {
  int32_t window = 0;
  std::vector<int32_t> rows;  // logits rows scored: row i predicts token i + 1
  std::vector<float> nll;     // [rows.size()]
  double nll_mean = 0;
  double perplexity = 0;
};

// `count` rows spread evenly over [first, last] (all of them when count >= last - first + 1).
std::vector<int32_t> spread_positions(int32_t first, int32_t last, int32_t count);

// The window of tokens that predicts token row + 1: BOS (tokens[0]), then tokens
// [max(1, row - window + 2), row].
std::vector<TokenId> recompute_window_prompt(const std::vector<TokenId>& tokens, int32_t row, int32_t window);

// Scores `rows` of the text with re-computed windows of `window` tokens through the real engine
// (cfg's KV dtype, block size, chunk and threads; its window and sinks must be 0).
// Throws std::invalid_argument for a window < 2, a row outside [0, n - 2] or a bad config.
RecomputeRun eval_recompute_window(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens,
                                   int32_t window, const std::vector<int32_t>& rows, const EvalConfig& cfg);

}  // namespace kvscope
