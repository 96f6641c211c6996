#include "engine/block_event_recorder.h"

#include <utility>

#include "telemetry/block_events.h"

namespace kvscope {

void BlockTotals::add(const BlockSnap& b, int sign) {
  if (b.status == BlockStatus::Used)
    used += sign, filled += sign * b.filled;
  else if (b.status == BlockStatus::Cached)
    cached += sign;
}

BlockEventRecorder::BlockEventRecorder(const KvSlotAllocator& kv, size_t max_events) : max_events_(max_events) {
  for (int32_t g = 0; g < kv.num_groups(); ++g) blocks_.emplace_back(static_cast<size_t>(kv.num_blocks(g)));
  totals_.resize(blocks_.size());
}

void BlockEventRecorder::note_hash_change(int32_t group, const BlockSnap& before, const BlockSnap& now) {
  const bool same = before.hashed && now.hashed && before.hash == now.hash;
  if (same) return;
  if (before.hashed) hash_changes_.push_back(HashChange{group, before.hash, false, now.owner});
  if (now.hashed) hash_changes_.push_back(HashChange{group, now.hash, true, now.owner});
}

void BlockEventRecorder::record(KvSlotAllocator& kv, uint64_t step, bool user_window,
                                const std::function<bool(SeqId)>& is_running) {
  std::vector<BlockEvent> evs;
  hash_changes_.clear();
  for (int32_t g = 0; g < kv.num_groups(); ++g) {
    changes_.clear();
    kv.take_block_changes(g, changes_);
    std::vector<BlockSnap>& prev = blocks_[static_cast<size_t>(g)];
    const size_t first = evs.size();
    for (const BlockChange& c : changes_) {
      BlockSnap& before = prev[static_cast<size_t>(c.block)];
      diff_block(before, c.now, c.block, step, evs);
      note_hash_change(g, before, c.now);
      totals_[static_cast<size_t>(g)].add(before, -1);
      totals_[static_cast<size_t>(g)].add(c.now, +1);
      before = c.now;
    }
    // Group 1 of the hybrid KV cache holds the sliding layers: leaving the window is its point.
    const bool windowed = g > 0 || user_window;
    for (size_t k = first; k < evs.size(); ++k) {
      BlockEvent& e = evs[k];
      e.group = g;
      const bool released = e.kind == BlockEventKind::Freed || e.kind == BlockEventKind::Cached;
      if (windowed && released && e.seq >= 0 && is_running(e.seq)) e.kind = BlockEventKind::DroppedOutOfWindow;
    }
  }
  evs.insert(evs.end(), scheduler_events_.begin(), scheduler_events_.end());  // preemptions, copies
  scheduler_events_.clear();
  for (const BlockEvent& e : evs) history_.push_back(e);
  while (history_.size() > max_events_) history_.pop_front();
  // Nobody read them for a long time: keep the newest max_events (trimmed in bulk, so a CLI
  // run that never reads them pays O(1) per event).
  auto append_bounded = [&](std::vector<BlockEvent>& to) {
    to.insert(to.end(), evs.begin(), evs.end());
    if (to.size() > 2 * max_events_) to.erase(to.begin(), to.end() - static_cast<std::ptrdiff_t>(max_events_));
  };
  append_bounded(unpublished_);
  append_bounded(unread_);
  last_ = std::move(evs);
}

}  // namespace kvscope
