#pragma once
// The hybrid KV cache of a model that mixes full-attention ("global") and sliding-window
// layers (Gemma 3: 5 sliding layers per global one). The two kinds of layers need different
// amounts of history, so they form two KV groups, each a KvCacheManager with its own block pool
// and its own block table per sequence:
//   group 0 (kGlobal):  the full-attention layers; keeps every block (or the user's window)
//   group 1 (kSliding): the sliding layers; a window of W drops (frees) every block wholly
//                       before the window, exactly as KvCacheManager does for a user window.
// A sequence therefore holds ~len/bs global blocks but at most ~W/bs + 1 sliding ones.
//
// Both groups see the same sequences with the same lengths at all times:
// - allocate_slots() asks both dry runs first, then allocates in both or in none (the
//   KvSlotAllocator contract), so the scheduler preempts when EITHER pool runs dry;
// - a prefix-cache hit is the shorter of the two groups' hits (hits are prefix-closed in each,
//   so the shorter one is a hit in both) and exactly that many tokens are attached in each.
//
// Limits of the sliding group's prefix cache (it reuses KvCacheManager's exact hash chain):
// a hit needs every block of the chain still cached in the sliding pool, although only the
// window's blocks are read; blocks that left the window sit at the LRU head, so a busy sliding
// pool evicts a prompt's first block early, and the eviction un-hashes the chain after it.
// And with W <= block size a block's parent has already left the window when the block fills,
// which ends the chain (no hits past it; Gemma 3's W = 512 is far above any block size).
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace kvscope {

class HybridKvManager : public KvSlotAllocator {
 public:
  static constexpr int kGlobal = 0;
  static constexpr int kSliding = 1;
  static constexpr int kGroups = 2;

  // sliding.sliding_window must be > 0; both groups must share block size and prefix caching.
  HybridKvManager(const KvCacheConfig& global, const KvCacheConfig& sliding);

  KvCacheManager& group(int g) { return groups_.at(static_cast<size_t>(g)); }
  const KvCacheManager& group(int g) const { return groups_.at(static_cast<size_t>(g)); }
  int64_t slot(int g, SeqId seq, int32_t pos) const { return group(g).slot(seq, pos); }

  // --- KvSlotAllocator (slot() answers for the global group) ---
  int32_t attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) override;
  int32_t blocks_needed(SeqId seq, int32_t n_new) const override;  // both groups together
  bool allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) override;
  int64_t slot(SeqId seq, int32_t pos) const override { return slot(kGlobal, seq, pos); }
  int32_t seq_len(SeqId seq) const override;
  bool has_seq(SeqId seq) const override { return groups_[kGlobal].has_seq(seq); }
  void fork(SeqId parent, SeqId child) override;
  void free(SeqId seq) override;
  std::vector<BlockCopy> take_pending_copies() override;           // each copy tagged with its group
  std::vector<BlockRelease> take_released_blocks() override;       // each tagged with its group
  void take_evictions(std::vector<EvictionRecord>& out) override;  // each tagged with its group
  int32_t peek_cached_prefix(std::span<const TokenId> prompt) const override;
  std::vector<int32_t> peek_cached_prefix_by_group(std::span<const TokenId> prompt) const override {
    return {groups_[kGlobal].peek_cached_prefix(prompt), groups_[kSliding].peek_cached_prefix(prompt)};
  }
  // max_len is unused: paging takes blocks as the sequence grows, nothing is reserved ahead.
  bool can_admit(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len = 0) const override;
  std::string never_fits(int32_t n_tokens, int32_t max_chunk) const override;

  // Prefix-cache counters of the hybrid as a whole (tokens attached in both groups).
  uint64_t prefix_queries_tokens() const { return queries_tokens_; }
  uint64_t prefix_hits_tokens() const { return hits_tokens_; }
  // Both managers' invariants, plus: the same sequences with the same lengths in both.
  void validate() const override;

  // Read-only view (KvSlotAllocator): group g is group(g); counters are summed over both pools
  // (prefix counters are the hybrid's own); the free space is the global group's.
  int32_t num_groups() const override { return kGroups; }
  int32_t num_blocks(int32_t g) const override { return group(g).num_blocks(0); }
  std::vector<BlockId> group_block_table(SeqId seq, int32_t g) const override {
    return group(g).group_block_table(seq, 0);
  }
  int64_t group_slot(int32_t g, SeqId seq, int32_t pos) const override { return slot(g, seq, pos); }
  void take_block_changes(int32_t g, std::vector<BlockChange>& out) override { group(g).take_block_changes(0, out); }
  KvAllocatorCounters allocator_counters() const override;
  AllocatorSnap allocator_snap() const override { return group(kGlobal).allocator_snap(); }

 private:
  // The prompt cut so that a group's prefix walk stops after `tokens` cached tokens.
  static std::span<const TokenId> limit_prefix(std::span<const TokenId> prompt, int32_t tokens);

  std::array<KvCacheManager, kGroups> groups_;
  uint64_t queries_tokens_ = 0;
  uint64_t hits_tokens_ = 0;
};

}  // namespace kvscope
