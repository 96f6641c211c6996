#pragma once
// Decode attention over a plain contiguous K/V array ([pos][kv_head][head_dim]), the layout of
// pre-paging engines. It exists to measure what walking a block table costs: the benchmark
// times it against CpuBackend::attention on the same context length, heads and KV dtype. Both
// run the same kernel (cpu/online_attention.h) over the same work split (one task per KV head),
// reading rows through the same dtype conversion; only the addressing differs.
#include <cstdint>

#include "kv/kv_dtype.h"

namespace kvscope {

class ThreadPool;

// K and V stored as `dtype` elements, [pos][kv_head][head_dim] (what a pre-paging engine keeps
// per layer, e.g. llama.cpp's K cache) or, head_major, [kv_head][n_pos][head_dim] (each head's
// keys one dense stream: the most favourable contiguous layout for this kernel); for the scaled
// dtypes one f32 scale per stored vector, in the same order.
struct ContiguousKv {
  KvDtype dtype = KvDtype::F32;
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  bool head_major = false;
  int64_t n_pos = 0;  // positions stored per head (head_major)
};

// One query token at position n_ctx - 1 against keys/values [first, n_ctx) (first > 0: a
// sliding-window layer sees only its window); q/out: [n_head][head_dim].
// prefetch_min_bytes: the paged path's rule, so the reference can be given the same help: a
// head whose visible K/V exceeds it has the next chunk's rows requested into L2 while the
// current chunk computes (the default: never, the hardware prefetcher alone).
void contiguous_attention_decode(ThreadPool& pool, const float* q, const ContiguousKv& kv, int32_t n_ctx,
                                 int32_t n_head, int32_t n_head_kv, int32_t head_dim, float scale, float* out,
                                 int32_t first = 0, int64_t prefetch_min_bytes = INT64_MAX);

}  // namespace kvscope
