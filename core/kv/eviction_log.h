#pragma once
// Prefix-cache eviction, as vLLM names it: the pool dropping a cached block's hash to reuse the
// block (or un-hashing its cached descendants, orphaned). This log attributes each dropped hash
// to the sequence whose allocation (or token eviction's holes) dropped it, for the request
// stories' miss reasons. Token eviction (H2O, SnapKV: holes in a sequence's rows) is another
// thing: kv/token_holes.h.
#include <cstddef>
#include <vector>

#include "kv/block_pool.h"

namespace kvscope {

class EvictionLog {
 public:
  // The pool's dropped hashes since the last call, attributed to `by`.
  void note(BlockPool& pool, SeqId by) {
    for (const BlockPool::DroppedHash& d : pool.take_dropped()) records_.push_back({0, d.hash, by, d.orphaned});
    // Bounded for owners that never read them (tests, tools): the oldest go first.
    constexpr size_t kMaxKept = 1 << 16;
    if (records_.size() > kMaxKept)
      records_.erase(records_.begin(), records_.begin() + static_cast<std::ptrdiff_t>(kMaxKept / 2));
  }
  void take(std::vector<EvictionRecord>& out) {
    out.insert(out.end(), records_.begin(), records_.end());
    records_.clear();
  }

 private:
  std::vector<EvictionRecord> records_;
};

}  // namespace kvscope
