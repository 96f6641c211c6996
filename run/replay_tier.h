#pragma once
// Replay's second KV tier (--tiers gpu=T,cpu=T): blocks the GPU pool evicts are kept in a CPU
// tier, an LRU set of block hashes, as vLLM's CPU offload and LMCache keep them. A prompt that
// misses on the GPU continues its prefix match in the CPU tier; those blocks are loaded back
// into GPU blocks (their KV is not recomputed, but moves over the host link in timed mode).
//
// TieredKvCacheManager is the engine's own KvCacheManager with that tier behind it: the
// scheduler and the untimed replay call attach_cached_prefix as always and get GPU + CPU hits.
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace kvscope {

class CpuTier {
 public:
  explicit CpuTier(int64_t capacity_blocks) : capacity_(capacity_blocks) {}
  void put(BlockHash h);    // newest; the oldest goes when full
  bool touch(BlockHash h);  // present: becomes newest
  int64_t size() const { return static_cast<int64_t>(lru_.size()); }
  int64_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }

 private:
  int64_t capacity_;
  std::list<BlockHash> lru_;  // front: newest
  std::unordered_map<BlockHash, std::list<BlockHash>::iterator> where_;
  uint64_t evictions_ = 0;
};

class TieredKvCacheManager : public KvCacheManager {
 public:
  // cpu_blocks 0: no CPU tier (plain KvCacheManager, with the hit counters).
  TieredKvCacheManager(const KvCacheConfig& cfg, int64_t cpu_blocks);
  // Before `seq` (not yet admitted) is: loads the CPU tier's blocks that continue its GPU
  // prefix into the GPU prefix cache, as many as the free pool takes. Returns the tokens loaded.
  int32_t load_from_cpu(SeqId seq, std::span<const TokenId> prompt);
  int32_t attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) override;
  bool allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) override;

  uint64_t gpu_hit_tokens() const { return gpu_hits_; }
  uint64_t cpu_hit_tokens() const { return cpu_hits_; }
  // CPU-tier tokens loaded since the last call (timed replay charges their transfer).
  int64_t take_loaded_tokens() {
    const int64_t n = loaded_;
    loaded_ = 0;
    return n;
  }
  const CpuTier* cpu_tier() const { return cpu_blocks_ > 0 ? &tier_ : nullptr; }

 private:
  void offload_evicted();

  struct Loaded {
    int32_t gpu_before = 0;  // the GPU prefix it had when the load ran
    int32_t tokens = 0;      // loaded from the CPU tier
  };
  int64_t cpu_blocks_;
  CpuTier tier_;
  std::unordered_map<SeqId, Loaded> pending_;
  std::unordered_set<SeqId> admitted_;  // hits count at a request's first admission only
  std::vector<EvictionRecord> evicted_;
  std::vector<BlockHash> chain_;
  uint64_t gpu_hits_ = 0, cpu_hits_ = 0;
  int64_t loaded_ = 0;
};

}  // namespace kvscope
