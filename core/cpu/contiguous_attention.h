#pragma once
// Decode attention over a plain contiguous K/V array ([pos][kv_head][head_dim]), the layout of
// pre-paging engines. It exists to measure what walking a block table costs: the benchmark
// times it against CpuBackend::attention on the same context length and heads.
#include <cstdint>

namespace kvscope {

class ThreadPool;

// One query token at position n_ctx - 1 against keys/values [0, n_ctx); q/out: [n_head][head_dim].
void contiguous_attention_decode(ThreadPool& pool, const float* q, const float* k, const float* v, int32_t n_ctx,
                                 int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale, float* out);

}  // namespace kvscope
