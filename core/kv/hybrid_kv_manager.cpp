#include "kv/hybrid_kv_manager.h"

#include <algorithm>
#include <stdexcept>

namespace kvscope {

namespace {
const KvCacheConfig& checked_sliding(const KvCacheConfig& global, const KvCacheConfig& sliding) {
  if (sliding.sliding_window <= 0) throw std::invalid_argument("hybrid KV cache: the sliding group needs a window");
  if (global.block_size != sliding.block_size || global.prefix_caching != sliding.prefix_caching)
    throw std::invalid_argument("hybrid KV cache: both groups must use the same block size and prefix caching");
  return sliding;
}
}  // namespace

HybridKvManager::HybridKvManager(const KvCacheConfig& global, const KvCacheConfig& sliding)
    : groups_{KvCacheManager(global), KvCacheManager(checked_sliding(global, sliding))} {}

std::span<const TokenId> HybridKvManager::limit_prefix(std::span<const TokenId> prompt, int32_t tokens) {
  // The walk never attaches the block holding the last token, so tokens + 1 tokens allow
  // exactly tokens / bs blocks (tokens is a multiple of the block size).
  return prompt.first(std::min(prompt.size(), static_cast<size_t>(tokens) + 1));
}

int32_t HybridKvManager::peek_cached_prefix(std::span<const TokenId> prompt) const {
  return std::min(groups_[kGlobal].peek_cached_prefix(prompt), groups_[kSliding].peek_cached_prefix(prompt));
}

int32_t HybridKvManager::attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) {
  KV_CHECK(!has_seq(seq), "attach_cached_prefix() on existing sequence " + std::to_string(seq));
  const int32_t hit = peek_cached_prefix(prompt);
  const auto cut = limit_prefix(prompt, hit);
  for (KvCacheManager& g : groups_)
    KV_CHECK(g.attach_cached_prefix(seq, cut) == hit, "a KV group attached a different prefix than both hold");
  if (groups_[kGlobal].config().prefix_caching) {
    queries_tokens_ += prompt.size();
    hits_tokens_ += static_cast<uint64_t>(hit);
  }
  return hit;
}

bool HybridKvManager::can_admit(std::span<const TokenId> prompt, int32_t n_tokens, int32_t) const {
  const auto cut = limit_prefix(prompt, peek_cached_prefix(prompt));
  return groups_[kGlobal].can_admit(cut, n_tokens) && groups_[kSliding].can_admit(cut, n_tokens);
}

std::string HybridKvManager::never_fits(int32_t n_tokens, int32_t max_chunk) const {
  static const char* const names[kGroups] = {"global layers", "sliding layers"};
  for (int g = 0; g < kGroups; ++g)
    if (auto why = groups_[static_cast<size_t>(g)].never_fits(n_tokens, max_chunk); !why.empty())
      return std::string(names[g]) + ": " + why;
  return {};
}

int32_t HybridKvManager::blocks_needed(SeqId seq, int32_t n_new) const {
  return groups_[kGlobal].blocks_needed(seq, n_new) + groups_[kSliding].blocks_needed(seq, n_new);
}

bool HybridKvManager::allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) {
  // Dry runs first: a group that succeeded cannot be rolled back (hashes, copies, drops).
  if (!groups_[kGlobal].can_allocate(seq, n_new) || !groups_[kSliding].can_allocate(seq, n_new)) return false;
  for (KvCacheManager& g : groups_)
    KV_CHECK(g.allocate_slots(seq, tokens, n_new), "a KV group failed after its dry run said it would not");
  return true;
}

int32_t HybridKvManager::seq_len(SeqId seq) const {
  const int32_t len = groups_[kGlobal].seq_len(seq);
  KV_CHECK(groups_[kSliding].seq_len(seq) == len,
           "KV groups disagree on the length of sequence " + std::to_string(seq));
  return len;
}

void HybridKvManager::fork(SeqId parent, SeqId child) {
  for (KvCacheManager& g : groups_) g.fork(parent, child);
}

void HybridKvManager::free(SeqId seq) {
  for (KvCacheManager& g : groups_) g.free(seq);
}

std::vector<BlockCopy> HybridKvManager::take_pending_copies() {
  std::vector<BlockCopy> out;
  for (int g = 0; g < kGroups; ++g)
    for (BlockCopy c : groups_[static_cast<size_t>(g)].take_pending_copies()) {
      c.group = g;
      out.push_back(c);
    }
  return out;
}

std::vector<BlockRelease> HybridKvManager::take_released_blocks() {
  std::vector<BlockRelease> out;
  for (int g = 0; g < kGroups; ++g)
    for (BlockRelease r : groups_[static_cast<size_t>(g)].take_released_blocks()) {
      r.group = g;
      out.push_back(r);
    }
  return out;
}

void HybridKvManager::take_evictions(std::vector<EvictionRecord>& out) {
  for (int g = 0; g < kGroups; ++g) {
    const size_t first = out.size();
    groups_[static_cast<size_t>(g)].take_evictions(out);
    for (size_t i = first; i < out.size(); ++i) out[i].group = g;
  }
}

void HybridKvManager::validate() const {
  for (const KvCacheManager& g : groups_) g.validate();
  const auto ids = groups_[kGlobal].sequences();
  if (ids != groups_[kSliding].sequences())
    throw std::logic_error("HybridKvManager invariant: the groups hold different sequences");
  for (SeqId id : ids)
    if (groups_[kGlobal].seq_len(id) != groups_[kSliding].seq_len(id))
      throw std::logic_error("HybridKvManager invariant: sequence " + std::to_string(id) +
                             " has different lengths in the groups");
}

KvAllocatorCounters HybridKvManager::allocator_counters() const {
  KvAllocatorCounters c = groups_[kGlobal].allocator_counters();
  const KvAllocatorCounters s = groups_[kSliding].allocator_counters();
  c.allocations += s.allocations;
  c.frees += s.frees;
  c.evictions += s.evictions;
  c.prefix_queries_tokens = queries_tokens_;
  c.prefix_hits_tokens = hits_tokens_;
  return c;
}

}  // namespace kvscope
