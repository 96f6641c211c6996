// Token eviction's books (kv/token_holes.h): holes inside blocks, freeing blocks whose every
// slot became a hole, and compaction that moves survivors together. Which tokens go is decided
// elsewhere (engine/token_eviction.h); this file only makes sure the decision can never touch a
// block another sequence or the prefix cache still reads.
#include "kv/token_holes.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvscope {

TokenHoles::TokenHoles(const TokenHolesConfig& cfg, BlockPool& pool, SeqTables& seqs, EvictionLog& log)
    : cfg_(cfg), pool_(pool), seqs_(seqs), log_(log) {
  if (cfg.enabled) {
    holes_.assign(static_cast<size_t>(cfg.num_blocks) * cfg.block_size, 0);
    slot_pos_.assign(holes_.size(), 0);
    layer_holes_.assign(holes_.size() * static_cast<size_t>(std::max(0, cfg.layers)), 0);
  }
}

const SeqTable& TokenHoles::table_of(SeqId seq) const {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "unknown sequence " + std::to_string(seq));
  return it->second;
}

SeqTable& TokenHoles::table_of(SeqId seq) {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "unknown sequence " + std::to_string(seq));
  return it->second;
}

void TokenHoles::fresh_block(BlockId b) {
  if (holes_.empty()) return;
  const auto bs = static_cast<size_t>(cfg_.block_size);
  std::fill_n(holes_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b) * bs), bs, uint8_t{0});
  for (int32_t l = 0; l < cfg_.layers; ++l)
    std::fill_n(&layer_hole(l, static_cast<int64_t>(b) * cfg_.block_size), bs, uint8_t{0});
}

void TokenHoles::note_positions(const SeqTable& t, int32_t from, int32_t to) {
  const int32_t bs = cfg_.block_size;
  for (int32_t row = from; row < to && !slot_pos_.empty(); ++row)
    slot_pos_[static_cast<size_t>(t.blocks[row / bs]) * bs + row % bs] = row + t.shift;
}

bool TokenHoles::row_hidden(SeqId seq, int32_t layer, int32_t row) const {
  const int64_t s = row_slot(seq, row);
  if (s < 0 || holes_[static_cast<size_t>(s)]) return true;
  return cfg_.layers > 0 && layer_hole(layer, s);
}

void TokenHoles::hide_rows(SeqId seq, int32_t layer, std::span<const int32_t> rows) {
  KV_CHECK(cfg_.layers > 0 && layer >= 0 && layer < cfg_.layers,
           "hide_rows() without per-layer token eviction for layer " + std::to_string(layer));
  for (int32_t row : rows) {
    KV_CHECK(row_punchable(seq, row) && !row_hidden(seq, layer, row),
             "hide_rows(): row " + std::to_string(row) + " is not punchable in layer " + std::to_string(layer));
    const int64_t s = row_slot(seq, row);
    layer_hole(layer, s) = 1;
    const BlockId b = static_cast<BlockId>(s / cfg_.block_size);
    if (pool_.state(b).hashed) pool_.unhash(b);  // another reader would see a layer's hole
  }
  if (!rows.empty()) {
    table_of(seq).token_evicted = true;
    log_.note(pool_, seq);
    counters_.tokens_hidden += rows.size();
  }
}

int64_t TokenHoles::hidden_slots() const {
  int64_t n = 0;
  for (size_t i = 0; i < layer_holes_.size(); ++i) n += layer_holes_[i] && !holes_[i % holes_.size()];
  return n;
}

int64_t TokenHoles::row_slot(SeqId seq, int32_t row) const {
  const SeqTable& t = table_of(seq);
  KV_CHECK(row >= 0 && row < t.len, "row_slot(): row " + std::to_string(row) + " outside the table");
  const BlockId b = t.blocks[static_cast<size_t>(row / cfg_.block_size)];
  return b == kNoBlock ? -1 : static_cast<int64_t>(b) * cfg_.block_size + row % cfg_.block_size;
}

bool TokenHoles::row_punchable(SeqId seq, int32_t row) const {
  if (holes_.empty()) return false;
  const int64_t s = row_slot(seq, row);
  if (s < 0 || holes_[static_cast<size_t>(s)]) return false;
  return pool_.state(static_cast<BlockId>(s / cfg_.block_size)).ref_count == 1;
}

int32_t TokenHoles::seq_holes(SeqId seq) const {
  int32_t n = 0;
  for (BlockId b : table_of(seq).blocks)
    if (b != kNoBlock) n += pool_.state(b).holes;
  return n;
}

TokenHoles::PunchOutcome TokenHoles::punch_rows(SeqId seq, std::span<const int32_t> rows) {
  KV_CHECK(!holes_.empty(), "punch_rows() without token eviction configured");
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "punch_rows(): unknown sequence " + std::to_string(seq));
  SeqTable& t = it->second;
  const int32_t bs = cfg_.block_size;
  PunchOutcome out;
  for (int32_t row : rows) {
    KV_CHECK(row_punchable(seq, row), "punch_rows(): row " + std::to_string(row) + " is not punchable");
    const int64_t s = row_slot(seq, row);
    const BlockId b = static_cast<BlockId>(s / bs);
    holes_[static_cast<size_t>(s)] = 1;
    for (int32_t l = 0; l < cfg_.layers; ++l) layer_hole(l, s) = 0;  // a hole hides it from every layer
    if (pool_.state(b).hashed) pool_.unhash(b);                      // its bytes no longer match the hash chain
    pool_.set_holes(b, pool_.state(b).holes + 1);
    ++out.punched;
    // A block whose every slot is a hole (never the one still being appended to) is given back.
    if (pool_.state(b).holes == bs) {
      pool_.unref(b);
      t.blocks[static_cast<size_t>(row / bs)] = kNoBlock;
      ++out.blocks_freed;
    }
  }
  if (out.punched > 0) t.token_evicted = true;
  log_.note(pool_, seq);
  counters_.tokens_evicted += static_cast<uint64_t>(out.punched);
  counters_.blocks_freed += static_cast<uint64_t>(out.blocks_freed);
  return out;
}

int32_t TokenHoles::first_holed_block(const SeqTable& t) const {
  for (int32_t bi = 0; bi < static_cast<int32_t>(t.blocks.size()); ++bi)
    if (t.blocks[static_cast<size_t>(bi)] == kNoBlock || pool_.state(t.blocks[static_cast<size_t>(bi)]).holes > 0)
      return bi;
  return -1;
}

bool TokenHoles::collect_live_blocks(const SeqTable& t, int32_t first, std::vector<BlockId>& live) const {
  for (size_t bi = static_cast<size_t>(first); bi < t.blocks.size(); ++bi)
    if (t.blocks[bi] != kNoBlock) {
      if (pool_.state(t.blocks[bi]).ref_count != 1) return false;  // shared: leave the table as it is
      live.push_back(t.blocks[bi]);
    }
  return true;
}

// After the moves: the first ceil(k / bs) live blocks hold the k survivors (with their
// per-layer bits), the rest go back to the pool.
void TokenHoles::rewrite_blocks(const std::vector<BlockId>& live, int32_t k, const std::vector<uint8_t>& hidden) {
  const int32_t bs = cfg_.block_size;
  const auto L = static_cast<size_t>(cfg_.layers);
  const auto keep = static_cast<size_t>((k + bs - 1) / bs);
  for (size_t j = 0; j < live.size(); ++j) {
    fresh_block(live[j]);
    if (j >= keep) {
      pool_.unref(live[j]);
      continue;
    }
    pool_.set_holes(live[j], 0);
    pool_.set_filled(live[j], std::min(bs, k - static_cast<int32_t>(j) * bs));
  }
  for (int32_t i = 0; L > 0 && i < k; ++i) {
    const int64_t dst = static_cast<int64_t>(live[static_cast<size_t>(i / bs)]) * bs + i % bs;
    for (size_t l = 0; l < L; ++l) layer_hole(static_cast<int32_t>(l), dst) = hidden[static_cast<size_t>(i) * L + l];
  }
}

// Survivors keep their order and move to the lowest free rows of the blocks the sequence keeps
// from `first` on. A survivor's destination is never after its source in that order, so the
// copies, applied in order, never overwrite a row not yet copied (like memmove towards the
// front).
int32_t TokenHoles::compact(SeqId seq) {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "compact(): unknown sequence " + std::to_string(seq));
  SeqTable& t = it->second;
  const int32_t bs = cfg_.block_size, first = first_holed_block(t);
  if (holes_.empty() || first < 0) return 0;
  std::vector<BlockId> live;
  if (!collect_live_blocks(t, first, live)) return 0;
  int32_t k = 0, moved = 0;
  const auto L = static_cast<size_t>(cfg_.layers);
  std::vector<uint8_t> hidden;  // survivor k's per-layer bits, written back after the blocks are cleared
  for (int32_t row = first * bs; row < t.len; ++row) {
    const int64_t src = row_slot(seq, row);
    if (src < 0 || holes_[static_cast<size_t>(src)]) continue;
    const int64_t dst = static_cast<int64_t>(live[static_cast<size_t>(k / bs)]) * bs + k % bs;
    for (size_t l = 0; l < L; ++l) hidden.push_back(layer_hole(static_cast<int32_t>(l), src));
    if (dst != src) {
      pending_slot_copies_.push_back({src, dst});
      slot_pos_[static_cast<size_t>(dst)] = slot_pos_[static_cast<size_t>(src)];
      ++moved;
    }
    ++k;
  }
  rewrite_blocks(live, k, hidden);
  const auto keep = static_cast<size_t>((k + bs - 1) / bs);
  t.blocks.resize(static_cast<size_t>(first));
  t.blocks.insert(t.blocks.end(), live.begin(), live.begin() + static_cast<std::ptrdiff_t>(keep));
  t.shift += t.len - (first * bs + k);
  t.len = first * bs + k;
  ++counters_.compactions;
  counters_.rows_moved += static_cast<uint64_t>(moved);
  counters_.blocks_compacted_away += live.size() - keep;
  return moved;
}

void TokenHoles::validate(SeqId id, const SeqTable& t) const {
  if (holes_.empty()) return;
  const int32_t bs = cfg_.block_size;
  const auto broken = [&](const std::string& what) {
    throw std::logic_error("KvCacheManager invariant (seq " + std::to_string(id) + "): " + what);
  };
  for (BlockId b : t.blocks) {
    if (b == kNoBlock) continue;
    const BlockState& st = pool_.state(b);
    int32_t n = 0;
    for (int32_t o = 0; o < bs; ++o) {
      const int64_t slot = static_cast<int64_t>(b) * bs + o;
      n += holes_[static_cast<size_t>(slot)];
      for (int32_t l = 0; l < cfg_.layers && holes_[static_cast<size_t>(slot)]; ++l)
        if (layer_hole(l, slot)) broken("slot " + std::to_string(slot) + " is a hole and still hidden per layer");
    }
    if (n != st.holes) broken("block " + std::to_string(b) + " hole count disagrees with its mask");
    if (n > 0 && st.hashed) broken("block " + std::to_string(b) + " has holes but is in the prefix cache");
  }
}

}  // namespace kvscope
