#pragma once
// How the hybrid KV cache divides a memory budget between its two block pools.
//
// A sequence of C tokens holds ceil(C / bs) global blocks but at most
// s = ceil(sinks / bs) + ceil(W / bs) + 1 sliding blocks whatever its length (plus, while a
// prefill chunk of c tokens runs, the blocks of that chunk). So the sliding pool is sized for
// the number of sequences that can run at full context (max_model_len) in the budget, capped by
// max_running, times s, plus one step's prefill chunks; everything else goes to the global
// pool. At that context both pools run out together; shorter sequences may find the sliding
// pool the tighter one (each needs as many sliding as global blocks while shorter than W), and
// the scheduler then preempts as for any full pool.
// Given a global block count instead of a budget (--kv-blocks), the sliding pool is sized so
// that it never limits max_running sequences (at most as many blocks as the global pool).
#include <cstdint>

namespace kvscope {

struct HybridPoolInput {
  int64_t budget_bytes = 0;        // used when global_blocks == 0
  int32_t global_blocks = 0;       // > 0: the global pool is given (then budget_bytes is ignored)
  int32_t sliding_blocks = 0;      // > 0: the sliding pool is given
  int64_t global_block_bytes = 0;  // bytes of one block of each group (its layers only)
  int64_t sliding_block_bytes = 0;
  int32_t block_size = 16;
  int32_t window = 0;  // the sliding group's window (> 0)
  int32_t sinks = 0;
  int32_t max_model_len = 0;
  int32_t max_chunk = 512;  // max batched tokens per step
  int32_t max_running = 64;
};

struct HybridPoolSplit {
  int32_t global_blocks = 0;
  int32_t sliding_blocks = 0;
  int32_t sliding_blocks_per_seq = 0;  // s above: what one decoding sequence holds at most
  double seqs_at_context = 0;          // sequences of max_model_len tokens both pools hold
};

// Throws std::invalid_argument when the budget cannot hold one sequence's worth of both pools.
HybridPoolSplit split_hybrid_pools(const HybridPoolInput& in);

}  // namespace kvscope
