#pragma once
// Split-KV attention (flash-decoding's idea, on the CPU): when a step has fewer (token, KV head)
// pairs than the pool has threads to keep busy (decode of one long sequence: gemma-3 has ONE KV
// head, so one pair per token), each pair's visible keys are cut into parts that different
// threads compute; each part leaves its unnormalised output and its running max and sum, and
// merging rescales every part to the common max: the result is the same softmax (up to float
// rounding of the rescale), whatever the number of parts.
#include <cstdint>
#include <vector>

namespace kvscope {

// How a layer's attention is cut into work: `parts` pieces per (token, KV head) pair.
struct AttentionSplit {
  int32_t parts = 1;
};

// One part per pair unless there are fewer than 2 pairs per thread and the visible keys are
// long enough (>= kMinKeysPerPart per part) for the merge to pay off.
AttentionSplit plan_attention_split(int64_t n_pairs, int64_t mean_visible_keys, int n_threads);
inline constexpr int64_t kMinKeysPerPart = 256;

// Where the parts of one pair live: part p's accumulators at acc + p * n_q * d, its maxima at
// m + p * n_q, its sums at l + p * n_q.
struct AttentionParts {
  const float* acc;
  const float* m;
  const double* l;
};

// out[n_q][d] = the normalised attention of `parts` partial passes.
void merge_attention_parts(const AttentionParts& p, int32_t parts, int32_t n_q, int32_t d, float* out);

}  // namespace kvscope
