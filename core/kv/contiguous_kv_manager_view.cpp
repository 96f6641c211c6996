// ContiguousKvManager's read-only view for telemetry (kv/kv_slot_allocator.h).
#include <algorithm>

#include "kv/contiguous_kv_manager.h"

namespace kvscope {

int32_t ContiguousKvManager::num_blocks(int32_t) const { return static_cast<int32_t>(arena_.total_slots() / unit_); }

std::vector<BlockId> ContiguousKvManager::group_block_table(SeqId seq, int32_t) const {
  std::vector<BlockId> t;
  if (!has_seq(seq)) return t;
  const int32_t len = seq_len(seq);
  if (len == 0) return t;
  // Reservations are unit-aligned, so the run is a table of consecutive blocks.
  const int64_t base_block = slot(seq, 0) / unit_;
  for (int32_t b = 0; static_cast<int64_t>(b) * unit_ < len; ++b) t.push_back(static_cast<BlockId>(base_block + b));
  return t;
}

void ContiguousKvManager::take_block_changes(int32_t, std::vector<BlockChange>& out) {
  std::vector<BlockSnap> blocks(static_cast<size_t>(num_blocks(0)));
  for (const ArenaRange& r : arena_.ranges()) {
    if (r.owner == kFreeRange) continue;
    for (int64_t slot = r.start; slot < r.start + r.length; slot += unit_) {
      BlockSnap& x = blocks[static_cast<size_t>(slot / unit_)];
      x.status = BlockStatus::Used;
      x.ref_count = 1;
      x.owner = r.owner;
      x.filled = static_cast<int32_t>(std::clamp<int64_t>(r.start + r.filled - slot, 0, unit_));
    }
  }
  out.reserve(out.size() + blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) out.push_back(BlockChange{static_cast<BlockId>(b), blocks[b]});
}

// The baseline allocates whole reservations.
KvAllocatorCounters ContiguousKvManager::allocator_counters() const {
  KvAllocatorCounters c;
  c.allocations = arena_.reservations();
  c.frees = arena_.releases();
  return c;
}

AllocatorSnap ContiguousKvManager::allocator_snap() const {
  const ArenaMetrics am = arena_.metrics();
  AllocatorSnap a;
  a.contiguous = true;
  a.total_slots = am.total_slots;
  a.total_free = am.total_free;
  a.largest_free_run = am.largest_free_run;
  a.external_fragmentation = am.external_fragmentation;
  a.live_allocations = am.live_allocations;
  a.reserve_policy = baseline_reserve_name(policy_);
  a.overflows = counters_.overflows;
  a.grown_in_place = counters_.grown_in_place;
  a.relocations = counters_.relocations;
  a.relocated_slots = counters_.relocated_slots;
  a.overflow_preemptions = counters_.overflow_preemptions;
  a.blocked_admission_steps = counters_.blocked_admission_steps;
  a.blocked_by_fragmentation_steps = counters_.blocked_by_fragmentation_steps;
  a.failed_reservations = am.failed_reservations;
  for (const ArenaRange& r : arena_.ranges()) a.ranges.push_back({r.start, r.length, r.owner, r.filled});
  a.slots_reserved = am.slots_reserved;
  a.slots_filled = am.slots_filled;
  a.waste_pct = am.waste_pct;
  return a;
}

}  // namespace kvscope
