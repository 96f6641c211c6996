#pragma once
// Block tables for the sequences of one KV group (a set of layers with the same attention
// type). Owns the BlockPool. Allocates on demand, shares blocks through the prefix cache and
// fork(), copies a shared partial block on write, and drops blocks that fall wholly outside a
// sliding window (keeping the sink blocks). All answers are plain structs. Token eviction's
// holes and compaction live in TokenHoles (kv/token_holes.h), which the manager owns.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "kv/eviction_log.h"
#include "kv/kv_slot_allocator.h"
#include "kv/register_lag.h"
#include "kv/seq_table.h"
#include "kv/token_holes.h"

namespace kvscope {

struct KvCacheConfig {
  int32_t block_size = 16;  // 8, 16, 32, 64 or 128
  int32_t num_blocks = 0;
  bool prefix_caching = true;
  int32_t sliding_window = 0;   // 0: full attention; else attention sees the last W positions
  int32_t sink_tokens = 0;      // with a window: the first S tokens are kept forever (StreamingLLM)
  uint64_t hash_salt = 0;       // mixed into every block hash: KV dtype, model identity...
  bool token_eviction = false;  // keep a per-slot hole mask (kv/token_holes.h)
  int32_t hole_layers = 0;      // > 0 (with token_eviction): per-layer token eviction, one more mask per layer
  // KIVI's residual (kv/register_lag.h): a full block enters the prefix cache only once this
  // many tokens of its sequence follow it. 0: as soon as it is full.
  int32_t register_lag = 0;
  // Collect blocks freed outside the prefix cache for take_released_blocks() (KIVI: the backend
  // drops their residual). Off: nothing is collected.
  bool report_released = false;
};

// BlockCopy (copy-on-write work for the backend) lives in kv/kv_types.h, shared with the baseline.

// SeqCacheStats and SeqTable live in kv/seq_table.h, shared with TokenHoles.

class KvCacheManager : public KvSlotAllocator {
 public:
  explicit KvCacheManager(const KvCacheConfig& cfg);
  KvCacheManager(const KvCacheManager&) = delete;  // token_holes_ refers to the pool and tables
  KvCacheManager& operator=(const KvCacheManager&) = delete;
  const KvCacheConfig& config() const { return cfg_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

  // New sequence: walk the prompt block by block through the prefix cache and attach every hit
  // (never the block holding the last prompt token, which must be recomputed for its logits).
  // Returns the number of prompt tokens whose K/V are already present.
  // With a sliding window: a hit still needs every block of the hash chain to be cached (the
  // chain is how a hit is proven exact), but blocks wholly before the window of the first
  // position to compute (and not sinks) are entered as kNoBlock without a ref: nothing reads them.
  int32_t attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) override;
  // Blocks that must be newly taken from the pool to hold n_new more tokens of seq.
  int32_t blocks_needed(SeqId seq, int32_t n_new) const override;
  // Reserve slots for tokens [len, len + n_new) of seq, where `tokens` holds all of seq's token
  // ids up to len + n_new (needed to hash blocks that become full). Returns false and changes
  // nothing when the pool cannot supply the blocks.
  bool allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) override;
  // Dry run of allocate_slots (same plan, window drops included): would it succeed now?
  // An unknown sequence counts as empty. Lets a caller holding several managers (the hybrid
  // KV cache) allocate in all of them or in none.
  bool can_allocate(SeqId seq, int32_t n_new) const;
  // Physical slot (block * block_size + offset) of position pos of seq.
  int64_t slot(SeqId seq, int32_t pos) const override;
  std::span<const BlockId> block_table(SeqId seq) const;  // kNoBlock where a block was dropped
  int32_t seq_len(SeqId seq) const override;              // tokens with a slot
  bool has_seq(SeqId seq) const override;
  // child shares all of parent's blocks (ref++); a partially filled last block is copied when
  // either side next appends to it (see take_pending_copies).
  void fork(SeqId parent, SeqId child) override;
  void free(SeqId seq) override;  // finished, cancelled or preempted: every block ref--
  std::vector<BlockCopy> take_pending_copies() override;
  std::vector<BlockRelease> take_released_blocks() override;
  void take_evictions(std::vector<EvictionRecord>& out) override;
  std::vector<SeqId> sequences() const;
  const SeqCacheStats& stats(SeqId seq) const;

  // Prefix-cache counters in tokens (monotonic counters, as vLLM exposes them).
  uint64_t prefix_queries_tokens() const { return queries_tokens_; }
  uint64_t prefix_hits_tokens() const { return hits_tokens_; }

  void validate() const override;  // ref counts == table references, free + used + evictable == total...

  // Token eviction's books (holes, per-layer hiding, compaction): kv/token_holes.h.
  TokenHoles& token_holes() { return token_holes_; }
  const TokenHoles& token_holes() const { return token_holes_; }
  TokenEvictionCounters token_eviction_counters() const override { return token_holes_.counters(); }

  // Read-only view (KvSlotAllocator): one group.
  int32_t num_blocks(int32_t group) const override;
  std::vector<BlockId> group_block_table(SeqId seq, int32_t group) const override;
  void take_block_changes(int32_t group, std::vector<BlockChange>& out) override;
  KvAllocatorCounters allocator_counters() const override;
  AllocatorSnap allocator_snap() const override;

  // Admission dry runs (KvSlotAllocator): no refs taken, no counters moved.
  int32_t peek_cached_prefix(std::span<const TokenId> prompt) const override;
  // max_len is unused: paging takes blocks as the sequence grows, nothing is reserved ahead.
  bool can_admit(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len = 0) const override;
  std::string never_fits(int32_t n_tokens, int32_t max_chunk) const override;
  // Blocks seq holds (table entries that are not kNoBlock): ~W/bs + 1 (+ sinks) with a window.
  int32_t blocks_held(SeqId seq) const;

 private:
  const SeqTable& table_of(SeqId seq) const;  // checks the sequence exists
  struct AllocationPlan {
    std::vector<int32_t> drops;  // table indices leaving the window, highest first
    int32_t freed_by_drops = 0;  // of those, blocks nobody else holds (back in the pool)
    bool cow = false;            // the shared partial last block must be copied first
    int32_t need = 0;            // blocks to take from the pool
  };
  AllocationPlan plan_allocation(const SeqTable& t, int32_t n_new) const;
  // The prefix-cache walk shared by attach and the dry runs: the hit blocks in prompt order,
  // kNoBlock for hits outside the window of the first position to compute (attached without a ref).
  std::vector<BlockId> cached_prefix_blocks(std::span<const TokenId> prompt) const;
  // Block index bi of a sequence whose next position is `len` will never be read again.
  bool block_outside_window(int32_t bi, int32_t len) const;
  // Register blocks [first, end) of table, all full, in the prefix cache while the chain holds.
  void register_full_blocks(std::vector<BlockId>& table, std::span<const TokenId> tokens, int32_t first, int32_t end);

  KvCacheConfig cfg_;
  BlockPool pool_;
  SeqTables seqs_;
  std::vector<BlockCopy> pending_copies_;
  RegisterLag register_lag_;  // KIVI's residual: when a full block may be registered
  EvictionLog evictions_;     // prefix-cache evictions, attributed (before token_holes_: it refers to it)
  TokenHoles token_holes_;
  uint64_t queries_tokens_ = 0;
  uint64_t hits_tokens_ = 0;
  std::vector<uint8_t> scratch_changed_;  // take_block_changes: per block
  std::vector<SeqId> scratch_owner_;
};

}  // namespace kvscope
