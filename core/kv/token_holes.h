#pragma once
// Token eviction's books for one KV group (engine/token_eviction.h decides which tokens go:
// H2O, SnapKV...; this keeps the books). Not to be confused with prefix-cache eviction, the
// pool dropping cached blocks (kv/eviction_log.h).
//
// A sequence's cache rows are its table's slots in order: row = position - rows removed by
// compaction (so rows == positions until a compaction). A token-evicted row is a hole: its
// slot's byte in hole_mask() is 1 and attention skips it. Holes are only ever punched into
// blocks the sequence holds alone (ref count 1); a holed block leaves the prefix cache (with its
// cached descendants) and a sequence with holes registers nothing more, so no other reader ever
// sees a hole, and a block still referenced by anyone else is never freed.
//
// Owned by KvCacheManager (kv/kv_cache_manager.h), whose block pool and tables it edits.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "kv/eviction_log.h"
#include "kv/kv_view.h"
#include "kv/seq_table.h"

namespace kvscope {

struct TokenHolesConfig {
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  bool enabled = false;  // off: no masks, no row is ever punchable
  int32_t layers = 0;    // > 0 (with enabled): per-layer token eviction, one more mask per layer
};

class TokenHoles {
 public:
  TokenHoles(const TokenHolesConfig& cfg, BlockPool& pool, SeqTables& seqs, EvictionLog& log);
  TokenHoles(const TokenHoles&) = delete;
  TokenHoles& operator=(const TokenHoles&) = delete;

  bool enabled() const { return !holes_.empty(); }
  std::span<const uint8_t> hole_mask() const { return holes_; }  // [num_blocks * block_size]
  // [num_blocks * block_size] the position each slot holds: once compaction moved rows, a layer
  // with its own sliding window (Gemma 3) still needs positions to know what it may see.
  std::span<const int32_t> slot_positions() const { return slot_pos_; }
  int32_t cache_rows(SeqId seq) const { return table_of(seq).len; }
  int32_t cache_row(SeqId seq, int32_t pos) const { return pos - table_of(seq).shift; }
  int64_t row_slot(SeqId seq, int32_t row) const;    // -1 when the row's block was freed
  bool row_punchable(SeqId seq, int32_t row) const;  // a live slot of a block only seq holds
  int32_t seq_holes(SeqId seq) const;                // holes in seq's blocks now
  struct PunchOutcome {
    int32_t punched = 0, blocks_freed = 0;
  };
  PunchOutcome punch_rows(SeqId seq, std::span<const int32_t> rows);  // every row must be punchable
  // Moves seq's surviving rows together from its first block with a hole, so that its table
  // has no holes and fewer blocks; the copies wait in take_pending_slot_copies() (apply them in
  // order before the next forward). Returns the rows moved, 0 (nothing done) when some block
  // from there on is shared.
  int32_t compact(SeqId seq);
  std::vector<SlotCopy> take_pending_slot_copies() { return std::exchange(pending_slot_copies_, {}); }

  // Per-layer token eviction (TokenHolesConfig::layers): a row hidden from one layer only. Its
  // slot stays (other layers still read it) until punch_rows() makes it a hole for all;
  // compaction moves a survivor's per-layer bits with it. [layers][num_blocks * block_size].
  std::span<const uint8_t> layer_hole_mask() const { return layer_holes_; }
  int32_t layers() const { return cfg_.layers; }
  bool row_hidden(SeqId seq, int32_t layer, int32_t row) const;             // hidden from that layer (or a hole)
  void hide_rows(SeqId seq, int32_t layer, std::span<const int32_t> rows);  // every row punchable, not hidden
  int64_t hidden_slots() const;  // (layer, slot) pairs hidden now, holes not counted
  TokenEvictionCounters counters() const {
    TokenEvictionCounters c = counters_;
    c.hidden_now = static_cast<uint64_t>(hidden_slots());
    return c;
  }

  // --- the manager's hooks ---
  void fresh_block(BlockId b);  // a block just taken from the pool: no holes
  // Rows [from, to) of t just got slots: record the positions they hold.
  void note_positions(const SeqTable& t, int32_t from, int32_t to);
  void validate(SeqId id, const SeqTable& t) const;  // masks agree with the pool's hole counts

 private:
  const SeqTable& table_of(SeqId seq) const;
  SeqTable& table_of(SeqId seq);
  uint8_t& layer_hole(int32_t layer, int64_t slot) {
    return layer_holes_[static_cast<size_t>(layer) * holes_.size() + static_cast<size_t>(slot)];
  }
  uint8_t layer_hole(int32_t layer, int64_t slot) const {
    return layer_holes_[static_cast<size_t>(layer) * holes_.size() + static_cast<size_t>(slot)];
  }
  int32_t first_holed_block(const SeqTable& t) const;
  // compact()'s steps: the blocks from `first` on (empty when one is shared), the survivors'
  // moves into them, and the blocks refilled (or freed) afterwards.
  bool collect_live_blocks(const SeqTable& t, int32_t first, std::vector<BlockId>& live) const;
  void rewrite_blocks(const std::vector<BlockId>& live, int32_t k, const std::vector<uint8_t>& hidden);

  TokenHolesConfig cfg_;
  BlockPool& pool_;
  SeqTables& seqs_;
  EvictionLog& log_;
  std::vector<uint8_t> holes_;                 // per slot, 1 = a hole (token-evicted)
  std::vector<uint8_t> layer_holes_;           // [layer][slot], 1 = hidden from that layer
  std::vector<int32_t> slot_pos_;              // per slot, its position
  std::vector<SlotCopy> pending_slot_copies_;  // compaction's work for the backend
  TokenEvictionCounters counters_;
};

}  // namespace kvscope
