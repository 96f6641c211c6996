#include "cpu/attention_split.h"

#include <algorithm>
#include <cmath>

namespace kvscope {

AttentionSplit plan_attention_split(int64_t n_pairs, int64_t mean_visible_keys, int n_threads) {
  AttentionSplit s;
  if (n_threads < 2 || n_pairs <= 0 || n_pairs >= 2LL * n_threads) return s;
  // Enough pieces for every thread to get two (the pool balances dynamically), no piece shorter
  // than kMinKeysPerPart keys.
  const int64_t want = (2LL * n_threads + n_pairs - 1) / n_pairs;
  const int64_t most = std::max<int64_t>(1, mean_visible_keys / kMinKeysPerPart);
  s.parts = static_cast<int32_t>(std::clamp<int64_t>(want, 1, most));
  return s;
}

void merge_attention_parts(const AttentionParts& p, int32_t parts, int32_t n_q, int32_t d, float* out) {
  for (int32_t h = 0; h < n_q; ++h) {
    float mx = -INFINITY;
    for (int32_t k = 0; k < parts; ++k) mx = std::max(mx, p.m[k * n_q + h]);
    double l = 0;
    float* o = out + static_cast<int64_t>(h) * d;
    std::fill(o, o + d, 0.0f);
    for (int32_t k = 0; k < parts; ++k) {
      const float mk = p.m[k * n_q + h];
      if (mk == -INFINITY) continue;  // a part that saw no key (cannot happen with >= 1 key per part)
      const float c = std::exp(mk - mx);
      l += p.l[k * n_q + h] * c;
      const float* a = p.acc + (static_cast<int64_t>(k) * n_q + h) * d;
      for (int32_t i = 0; i < d; ++i) o[i] += c * a[i];
    }
    const float inv = l > 0.0 ? static_cast<float>(1.0 / l) : 0.0f;
    for (int32_t i = 0; i < d; ++i) o[i] *= inv;
  }
}

}  // namespace kvscope
