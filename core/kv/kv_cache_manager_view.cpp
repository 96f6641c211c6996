// KvCacheManager's read-only view for telemetry (kv/kv_slot_allocator.h): block states with
// their owners, block tables, counters, free space. Kept apart from the allocation logic.
#include <algorithm>

#include "kv/kv_cache_manager.h"

namespace kvscope {

int32_t KvCacheManager::num_blocks(int32_t) const { return pool_.num_blocks(); }

std::vector<BlockId> KvCacheManager::group_block_table(SeqId seq, int32_t) const {
  if (!has_seq(seq)) return {};
  const auto t = block_table(seq);
  return {t.begin(), t.end()};
}

static BlockSnap block_snap_of(const BlockState& st) {
  BlockSnap x;
  x.ref_count = st.ref_count;
  x.filled = st.filled;
  x.holes = st.ref_count > 0 ? st.holes : 0;  // a freed block keeps its count until taken again: not holes now
  x.hashed = st.hashed;
  x.hash = st.hash;
  x.status = st.ref_count > 0 ? BlockStatus::Used : (st.hashed ? BlockStatus::Cached : BlockStatus::Free);
  return x;
}

void KvCacheManager::take_block_changes(int32_t, std::vector<BlockChange>& out) {
  std::vector<BlockId> changed = pool_.take_changed();
  if (changed.empty()) return;
  std::sort(changed.begin(), changed.end());  // block order, as a whole-pool comparison reports them
  const size_t n = static_cast<size_t>(pool_.num_blocks());
  if (scratch_changed_.size() < n) {
    scratch_changed_.resize(n, 0);
    scratch_owner_.resize(n, -1);
  }
  // Owner = the lowest sequence id holding the block. A block changes hands only through a
  // ref or unref, so the blocks the pool touched are the only ones whose owner can differ.
  for (BlockId b : changed) scratch_changed_[static_cast<size_t>(b)] = 1, scratch_owner_[static_cast<size_t>(b)] = -1;
  for (const auto& [id, t] : seqs_)
    for (BlockId b : t.blocks) {
      if (b == kNoBlock || !scratch_changed_[static_cast<size_t>(b)]) continue;
      SeqId& o = scratch_owner_[static_cast<size_t>(b)];
      if (o < 0 || id < o) o = id;
    }
  for (BlockId b : changed) {
    const size_t i = static_cast<size_t>(b);
    BlockChange c{b, block_snap_of(pool_.state(b))};
    c.now.owner = scratch_owner_[i];
    out.push_back(c);
    scratch_changed_[i] = 0;
  }
}

KvAllocatorCounters KvCacheManager::allocator_counters() const {
  KvAllocatorCounters c;
  c.allocations = pool_.counters().allocations;
  c.frees = pool_.counters().frees;
  c.evictions = pool_.counters().evictions;
  c.prefix_queries_tokens = queries_tokens_;
  c.prefix_hits_tokens = hits_tokens_;
  return c;
}

// Any free block serves any sequence, so the largest usable run is all free memory.
AllocatorSnap KvCacheManager::allocator_snap() const {
  AllocatorSnap a;
  const int64_t free_slots = static_cast<int64_t>(pool_.num_free()) * cfg_.block_size;
  a.total_slots = static_cast<int64_t>(pool_.num_blocks()) * cfg_.block_size;
  a.total_free = free_slots;
  a.largest_free_run = free_slots;
  a.live_allocations = static_cast<int32_t>(seqs_.size());
  return a;
}

}  // namespace kvscope
