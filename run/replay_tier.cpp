#include "run/replay_tier.h"

#include <algorithm>
#include <limits>

#include "kv/block_hash.h"

namespace kvscope {

void CpuTier::put(BlockHash h) {
  if (capacity_ <= 0 || touch(h)) return;
  if (static_cast<int64_t>(lru_.size()) >= capacity_) {
    where_.erase(lru_.back());
    lru_.pop_back();
    ++evictions_;
  }
  lru_.push_front(h);
  where_[h] = lru_.begin();
}

bool CpuTier::touch(BlockHash h) {
  auto it = where_.find(h);
  if (it == where_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  return true;
}

TieredKvCacheManager::TieredKvCacheManager(const KvCacheConfig& cfg, int64_t cpu_blocks)
    : KvCacheManager(cfg), cpu_blocks_(cpu_blocks), tier_(cpu_blocks) {}

int32_t TieredKvCacheManager::load_from_cpu(SeqId seq, std::span<const TokenId> prompt) {
  if (cpu_blocks_ <= 0 || prompt.empty()) return 0;
  const int32_t gpu = KvCacheManager::peek_cached_prefix(prompt);
  // The GPU manager's rule: never the block that holds the prompt's last token.
  const int32_t bs = config().block_size;
  const int32_t last_block = (static_cast<int32_t>(prompt.size()) - 1) / bs;
  BlockHash parent = kRootBlockHash;
  int32_t b = 0;
  for (; b < gpu / bs; ++b)
    parent = block_hash(parent, prompt.subspan(static_cast<size_t>(b) * bs, bs), config().hash_salt);
  int32_t cpu = 0;
  for (; b < last_block; ++b) {
    parent = block_hash(parent, prompt.subspan(static_cast<size_t>(b) * bs, bs), config().hash_salt);
    if (!tier_.touch(parent)) break;
    cpu += bs;
  }
  if (cpu == 0) return 0;
  // Written into GPU blocks by a stand-in sequence, then released: they stay hashed, evictable.
  constexpr SeqId kLoader = std::numeric_limits<SeqId>::min();
  const int32_t attached = KvCacheManager::attach_cached_prefix(kLoader, prompt.first(static_cast<size_t>(gpu + cpu)));
  while (cpu > 0 && !KvCacheManager::allocate_slots(kLoader, prompt.first(static_cast<size_t>(attached + cpu)), cpu))
    cpu -= bs;
  KvCacheManager::free(kLoader);
  offload_evicted();
  pending_[seq] = {attached, cpu};
  loaded_ += cpu;
  return cpu;
}

int32_t TieredKvCacheManager::attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) {
  const int32_t hit = KvCacheManager::attach_cached_prefix(seq, prompt);
  if (!admitted_.insert(seq).second) return hit;  // a preempted request coming back
  int32_t cpu = 0;
  if (auto it = pending_.find(seq); it != pending_.end()) {
    cpu = std::clamp(hit - it->second.gpu_before, 0, it->second.tokens);
    pending_.erase(it);
  }
  gpu_hits_ += static_cast<uint64_t>(hit - cpu);
  cpu_hits_ += static_cast<uint64_t>(cpu);
  return hit;
}

bool TieredKvCacheManager::allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) {
  const bool ok = KvCacheManager::allocate_slots(seq, tokens, n_new);
  if (cpu_blocks_ > 0) offload_evicted();
  return ok;
}

void TieredKvCacheManager::offload_evicted() {
  evicted_.clear();
  take_evictions(evicted_);
  for (const EvictionRecord& e : evicted_) tier_.put(e.hash);
}

}  // namespace kvscope
