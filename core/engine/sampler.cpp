#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

namespace kvscope {

// The first index holding the largest value (NaN never wins, except that a NaN at index 0
// is returned when nothing compares greater, as in a running "greater than best" scan). The
// running scan is one dependent compare per element (262144 a step on gemma); here the maximum
// comes from 16 independent lanes (each starting at element 0, so a NaN there poisons them all,
// and no other NaN is ever taken), then one pass finds its first occurrence (-0 == +0).
TokenId argmax_token(std::span<const float> logits) {
  const size_t n = logits.size();
  if (n == 0) return 0;
  // A GCC/Clang vector type: one zmm (or 2-4 narrower registers in a portable build).
  constexpr size_t kLanes = 16;
  typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));
  Lanes acc;
  for (size_t j = 0; j < kLanes; ++j) acc[j] = logits[0];
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    std::memcpy(&v, logits.data() + i, sizeof v);
    acc = v > acc ? v : acc;
  }
  float lane[kLanes];
  std::memcpy(lane, &acc, sizeof lane);
  float m = lane[0];
  for (size_t j = 1; j < kLanes; ++j) m = lane[j] > m ? lane[j] : m;
  for (; i < n; ++i) m = logits[i] > m ? logits[i] : m;
  for (size_t k = 0; k < n; ++k)
    if (logits[k] == m) return static_cast<TokenId>(k);
  return 0;  // logits[0] is NaN
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

TokenId Sampler::sample(std::span<const float> logits, std::span<const TokenId> history) {
  if (!p_.logit_bias.empty()) {
    biased_.assign(logits.begin(), logits.end());
    for (const auto& [id, bias] : p_.logit_bias)
      if (id >= 0 && static_cast<size_t>(id) < biased_.size()) biased_[static_cast<size_t>(id)] += bias;
    logits = biased_;
  }
  const bool penalize = p_.repetition_penalty != 1.0f && p_.repetition_last_n != 0;
  if (p_.temperature <= 0.0f && !penalize) return argmax_token(logits);

  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {logits[i], static_cast<TokenId>(i)};
  if (penalize) {
    // llama.cpp semantics: each distinct recent token's logit is divided by the penalty when
    // positive and multiplied when negative.
    const size_t n =
        p_.repetition_last_n < 0 ? history.size() : std::min(history.size(), static_cast<size_t>(p_.repetition_last_n));
    std::unordered_set<TokenId> seen(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
    for (TokenId t : seen) {
      if (t < 0 || static_cast<size_t>(t) >= cand_.size()) continue;
      float& l = cand_[static_cast<size_t>(t)].first;
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    }
  }
  if (p_.temperature <= 0.0f) {
    auto best = std::max_element(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    });
    return best->second;
  }
  // Sort descending (ties: lower id first) so the truncations below are prefixes.
  std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  size_t keep = cand_.size();
  if (p_.top_k > 0) keep = std::min(keep, static_cast<size_t>(p_.top_k));
  // Probabilities at temperature T over the kept candidates.
  std::vector<double> prob(keep);
  const double mx = cand_[0].first;
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    prob[i] = std::exp((cand_[i].first - mx) / p_.temperature);
    sum += prob[i];
  }
  for (auto& x : prob) x /= sum;
  if (p_.min_p > 0.0f) {
    const double floor = p_.min_p * prob[0];
    size_t k = 1;
    while (k < keep && prob[k] >= floor) ++k;
    keep = k;
  }
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t k = 0;
    while (k < keep) {
      cum += prob[k++];
      if (cum >= p_.top_p) break;
    }
    keep = std::max<size_t>(k, 1);
  }
  std::discrete_distribution<size_t> dist(prob.begin(), prob.begin() + static_cast<std::ptrdiff_t>(keep));
  return cand_[dist(rng_)].second;
}

}  // namespace kvscope
