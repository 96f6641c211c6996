#pragma once
// Block tables for the sequences of one KV group (a set of layers with the same attention
// type). Owns the BlockPool. Allocates on demand, shares blocks through the prefix cache and
// fork(), copies a shared partial block on write, and drops blocks that fall wholly outside a
// sliding window (keeping the sink blocks). All answers are plain structs.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_slot_allocator.h"

namespace kvscope {

struct KvCacheConfig {
  int32_t block_size = 16;       // 8, 16, 32, 64 or 128
  int32_t num_blocks = 0;
  bool prefix_caching = true;
  int32_t sliding_window = 0;    // 0: full attention; else attention sees the last W positions
  int32_t sink_tokens = 0;       // with a window: the first S tokens are kept forever (StreamingLLM)
  uint64_t hash_salt = 0;        // mixed into every block hash: KV dtype, model identity...
  bool token_eviction = false;   // keep a per-slot hole mask (kv_cache_eviction.cpp)
  int32_t evict_layers = 0;      // > 0 (with token_eviction): per-layer eviction, one more mask per layer
  // KIVI's residual (KvLayout::kivi_residual): a full block enters the prefix cache only once
  // this many tokens of its sequence follow it, the step in which the backend quantizes it, so
  // no other sequence ever finds a block that will still change. 0: as soon as it is full.
  int32_t register_lag = 0;
  // Collect blocks freed outside the prefix cache for take_released_blocks() (KIVI: the backend
  // drops their residual). Off: nothing is collected.
  bool report_released = false;
};


// BlockCopy (copy-on-write work for the backend) lives in kv/kv_types.h, shared with the baseline.

struct SeqCacheStats {
  int32_t cached_prompt_tokens = 0;  // prompt tokens found in the prefix cache at admission
};

class KvCacheManager : public KvSlotAllocator {
 public:
  explicit KvCacheManager(const KvCacheConfig& cfg);
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
  int32_t seq_len(SeqId seq) const override;                 // tokens with a slot
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

  // --- token eviction (engine/token_eviction.h decides what; this keeps the books) ---
  // A sequence's cache rows are its table's slots in order: row = position - rows removed by
  // compaction (so rows == positions until a compaction). Evicted rows are holes: their slot's
  // byte in hole_mask() is 1 and attention skips it. Holes are only ever punched into blocks
  // the sequence holds alone (ref count 1); a holed block leaves the prefix cache (with its
  // cached descendants) and an evicting sequence registers nothing more, so no other reader
  // ever sees a hole, and a block still referenced by anyone else is never freed.
  std::span<const uint8_t> hole_mask() const { return holes_; }  // [num_blocks * block_size]
  // [num_blocks * block_size] the position each slot holds: once compaction moved rows, a layer
  // with its own sliding window (Gemma 3) still needs positions to know what it may see.
  std::span<const int32_t> slot_positions() const { return slot_pos_; }
  int32_t cache_rows(SeqId seq) const { return table_of(seq).len; }
  int32_t cache_row(SeqId seq, int32_t pos) const { return pos - table_of(seq).shift; }
  int64_t row_slot(SeqId seq, int32_t row) const;        // -1 when the row's block was freed
  bool row_evictable(SeqId seq, int32_t row) const;      // a live slot of a block only seq holds
  int32_t seq_holes(SeqId seq) const;                    // holes in seq's blocks now
  struct EvictOutcome {
    int32_t evicted = 0, blocks_freed = 0;
  };
  EvictOutcome evict_rows(SeqId seq, std::span<const int32_t> rows);  // every row must be evictable
  // Moves seq's surviving rows together from its first block with a hole, so that its table
  // has no holes and fewer blocks; the copies wait in take_pending_slot_copies() (apply them in
  // order before the next forward). Returns the rows moved, 0 (nothing done) when some block
  // from there on is shared.
  int32_t compact(SeqId seq);
  // Per-layer eviction (KvCacheConfig::evict_layers): a row hidden from one layer only. Its slot
  // stays (other layers still read it) until evict_rows() makes it a hole for all; compaction
  // moves a survivor's per-layer bits with it. [evict_layers][num_blocks * block_size].
  std::span<const uint8_t> layer_hole_mask() const { return layer_holes_; }
  int32_t evict_layers() const { return cfg_.evict_layers; }
  bool row_hidden(SeqId seq, int32_t layer, int32_t row) const;  // hidden from that layer (or a hole)
  void hide_rows(SeqId seq, int32_t layer, std::span<const int32_t> rows);  // every row evictable, not hidden
  int64_t hidden_slots() const;  // (layer, slot) pairs hidden now, holes not counted
  std::vector<SlotCopy> take_pending_slot_copies() { return std::exchange(pending_slot_copies_, {}); }
  EvictionCounters eviction_counters() const override {
    EvictionCounters c = evict_counters_;
    c.hidden_now = static_cast<uint64_t>(hidden_slots());
    return c;
  }

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
  struct SeqTable {
    std::vector<BlockId> blocks;
    int32_t len = 0;                // cache rows (holes included)
    int32_t shift = 0;              // rows removed by compaction: position = row + shift
    bool evicted = false;           // token eviction touched it: nothing more enters the prefix cache
    SeqCacheStats stats;
  };
  const SeqTable& table_of(SeqId seq) const;  // checks the sequence exists
  struct AllocationPlan {
    std::vector<int32_t> drops;   // table indices leaving the window, highest first
    int32_t freed_by_drops = 0;   // of those, blocks nobody else holds (back in the pool)
    bool cow = false;             // the shared partial last block must be copied first
    int32_t need = 0;             // blocks to take from the pool
  };
  AllocationPlan plan_allocation(const SeqTable& t, int32_t n_new) const;
  // The prefix-cache walk shared by attach and the dry runs: the hit blocks in prompt order,
  // kNoBlock for hits outside the window of the first position to compute (attached without a ref).
  std::vector<BlockId> cached_prefix_blocks(std::span<const TokenId> prompt) const;
  // Block index bi of a sequence whose next position is `len` will never be read again.
  bool block_outside_window(int32_t bi, int32_t len) const;
  // Register blocks [first, end) of table, all full, in the prefix cache while the chain holds.
  void register_full_blocks(std::vector<BlockId>& table, std::span<const TokenId> tokens, int32_t first,
                            int32_t end);

  KvCacheConfig cfg_;
  BlockPool pool_;
  std::unordered_map<SeqId, SeqTable> seqs_;
  std::vector<BlockCopy> pending_copies_;
  std::vector<uint8_t> holes_;                 // token eviction: per slot, 1 = evicted
  std::vector<uint8_t> layer_holes_;           // per-layer eviction: [layer][slot], 1 = hidden from that layer
  uint8_t& layer_hole(int32_t layer, int64_t slot) { return layer_holes_[static_cast<size_t>(layer) * holes_.size() + static_cast<size_t>(slot)]; }
  std::vector<int32_t> slot_pos_;              // token eviction: per slot, its position
  std::vector<SlotCopy> pending_slot_copies_;  // compaction's work for the backend
  EvictionCounters evict_counters_;
  void fresh_block(BlockId b);                 // a block just taken: no holes
  void validate_holes(SeqId id, const SeqTable& t) const;
  int32_t first_holed_block(const SeqTable& t) const;
  std::vector<EvictionRecord> evictions_;
  void note_evictions(SeqId by);  // the pool's dropped hashes, attributed to `by`
  uint64_t queries_tokens_ = 0;
  uint64_t hits_tokens_ = 0;
  std::vector<uint8_t> scratch_changed_;  // take_block_changes: per block
  std::vector<SeqId> scratch_owner_;
};

}  // namespace kvscope
