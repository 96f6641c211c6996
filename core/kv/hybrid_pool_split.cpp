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
    throw std::invalid_argument(
        "hybrid KV pools: block size, window, max_model_len, block bytes and max_running must be positive");
  const int64_t bs = in.block_size;
  const int64_t g = ceil_div(in.max_model_len, bs);  // global blocks per full sequence
  const int64_t s = std::min(g, ceil_div(in.sinks, bs) + ceil_div(in.window, bs) + 1);  // sliding, decoding
  // Peak of one sequence while a chunk runs (as KvCacheManager::never_fits computes it).
  const int64_t c = std::clamp<int64_t>(in.max_chunk, 1, in.max_model_len);
  const int64_t peak = std::min(g, ceil_div(in.sinks, bs) + ceil_div(in.window - 1 + c, bs) + 1);
  // Prefill chunks of one step hold at most ceil(c / bs) blocks beyond the decoding state,
  // plus one partial block per prefilling sequence.
  auto sliding_for = [&](double n) {
    return std::max<int64_t>(
        peak, static_cast<int64_t>(std::ceil(n * s)) + ceil_div(c, bs) + static_cast<int64_t>(std::ceil(n)));
  };

  HybridPoolSplit out;
  out.sliding_blocks_per_seq = static_cast<int32_t>(s);
  int64_t sliding = in.sliding_blocks;
  if (in.global_blocks > 0) {
    // A block count, not a budget: the sliding pool must not be what limits max_running short
    // sequences, which need as many sliding as global blocks (never more than the global pool).
    out.global_blocks = in.global_blocks;
    if (sliding <= 0)
      sliding = std::max<int64_t>(peak, std::min<int64_t>(sliding_for(in.max_running), in.global_blocks));
  } else {
    if (in.budget_bytes <= 0) throw std::invalid_argument("hybrid KV pools: the KV memory budget must be positive");
    const double per_seq = static_cast<double>(g * in.global_block_bytes + s * in.sliding_block_bytes);
    const double n = std::min<double>(in.max_running, static_cast<double>(in.budget_bytes) / per_seq);
    if (sliding <= 0) sliding = sliding_for(n);
    const int64_t left = in.budget_bytes - sliding * in.sliding_block_bytes;
    const int64_t global = left > 0 ? std::min<int64_t>(left / in.global_block_bytes, 1 << 30) : 0;
    if (global < 1)
      throw std::invalid_argument("KV memory budget of " + std::to_string(in.budget_bytes) +
                                  " bytes is too small for the hybrid KV cache: the sliding group alone needs " +
                                  std::to_string(sliding * in.sliding_block_bytes) + " bytes (" +
                                  std::to_string(sliding) + " blocks)");
    out.global_blocks = static_cast<int32_t>(global);
  }
  out.seqs_at_context = std::min(static_cast<double>(out.global_blocks) / static_cast<double>(g),
                                 static_cast<double>(sliding) / static_cast<double>(s));
  out.sliding_blocks = static_cast<int32_t>(std::min<int64_t>(sliding, 1 << 30));
  return out;
}

}  // namespace kvscope
