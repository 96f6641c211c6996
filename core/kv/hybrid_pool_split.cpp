#include "kv/hybrid_pool_split.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kvscope {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

HybridPoolSplit split_hybrid_pools(const HybridPoolInput& in) {
  if (in.block_size <= 0 || in.window <= 0 || in.max_model_len <= 0 || in.global_block_bytes <= 0 ||
      in.sliding_block_bytes <= 0 || in.max_running <= 0)
    throw std::invalid_argument("hybrid KV pools: block size, window, max_model_len, block bytes and max_running must be positive");
  const int64_t bs = in.block_size;
  const int64_t g = ceil_div(in.max_model_len, bs);                                // global blocks per full sequence
  const int64_t s = std::min(g, ceil_div(in.sinks, bs) + ceil_div(in.window, bs) + 1);  // sliding, decoding
  // Peak of one sequence while a chunk runs (as KvCacheManager::never_fits computes it).
  const int64_t c = std::clamp<int64_t>(in.max_chunk, 1, in.max_model_len);
  const int64_t peak = std::min(g, ceil_div(in.sinks, bs) + ceil_div(in.window - 1 + c, bs) + 1);
  const int64_t chunk_extra = peak - s;

  HybridPoolSplit out;
  out.sliding_blocks_per_seq = static_cast<int32_t>(s);
  double n = 0;
  if (in.global_blocks > 0) {
    n = std::min<double>(in.max_running, std::max(1.0, std::ceil(static_cast<double>(in.global_blocks) / g)));
    out.global_blocks = in.global_blocks;
  } else {
    if (in.budget_bytes <= 0) throw std::invalid_argument("hybrid KV pools: the KV memory budget must be positive");
    const double per_seq = static_cast<double>(g * in.global_block_bytes + s * in.sliding_block_bytes);
    n = std::min<double>(in.max_running, static_cast<double>(in.budget_bytes) / per_seq);
  }
  const int64_t sliding = in.sliding_blocks > 0 ? in.sliding_blocks
                                                : std::max<int64_t>(peak, static_cast<int64_t>(std::ceil(n * s)) + chunk_extra);
  if (in.global_blocks <= 0) {
    const int64_t left = in.budget_bytes - sliding * in.sliding_block_bytes;
    const int64_t global = left > 0 ? std::min<int64_t>(left / in.global_block_bytes, 1 << 30) : 0;
    if (global < 1)
      throw std::invalid_argument("KV memory budget of " + std::to_string(in.budget_bytes) + " bytes is too small for the hybrid KV cache: the sliding group alone needs " +
                                  std::to_string(sliding * in.sliding_block_bytes) + " bytes (" + std::to_string(sliding) + " blocks)");
    out.global_blocks = static_cast<int32_t>(global);
    n = std::min(n, static_cast<double>(global) / g);
  }
  out.sliding_blocks = static_cast<int32_t>(std::min<int64_t>(sliding, 1 << 30));
  out.seqs_at_context = n;
  return out;
}

}  // namespace kvscope
