#pragma once
// Turns one row of logits into a token: greedy, or temperature with top-k / top-p / min-p and a
// repetition penalty. Each request has its own RNG seeded from its seed, so runs reproduce.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "types/sampling_params.h"
#include "kv/kv_types.h"

namespace kvscope {

// argmax with the lowest id winning ties (llama_sampler_greedy).
TokenId argmax_token(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // `history` is the sequence so far (for the repetition penalty).
  TokenId sample(std::span<const float> logits, std::span<const TokenId> history);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, TokenId>> cand_;
  std::vector<float> biased_;  // the logits with logit_bias added
};

}  // namespace kvscope
