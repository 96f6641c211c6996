#pragma once
// Turns what the allocator's blocks did during a step into block events, and keeps every
// block's state current for the snapshot (copying it is then the whole pool's state) with
// running totals per KV group, so a snapshot needs no pass over the pool.
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "kv/kv_slot_allocator.h"
#include "telemetry/snapshot.h"

namespace kvscope {

// Used/cached blocks and filled slots of one KV group, kept by adding every block's change.
struct BlockTotals {
  int32_t used = 0, cached = 0;
  int64_t filled = 0;  // slots holding a token, in used blocks
  void add(const BlockSnap& b, int sign);
};

// A block hash entering or leaving a KV group's prefix cache during one record(): the prefix
// ledger of the request stories (engine/prefix_miss.h) is kept from these.
struct HashChange {
  int32_t group = 0;
  BlockHash hash = 0;
  bool registered = false;  // false: the hash was dropped (evicted, or orphaned by its parent)
  SeqId seq = -1;           // registered: the block's owner; dropped: the block's new owner (-1: none)
};

class BlockEventRecorder {
 public:
  BlockEventRecorder(const KvSlotAllocator& kv, size_t max_events);

  // Events the scheduler caused this step (preemptions, copies), recorded with the next record().
  void add_scheduler_event(const BlockEvent& e) { scheduler_events_.push_back(e); }
  // Diffs every block the allocator reports changed since the last call. is_running(seq): a
  // block released while its sequence keeps running fell out of the sliding window (with a user
  // window, or always in a sliding KV group).
  void record(KvSlotAllocator& kv, uint64_t step, bool user_window, const std::function<bool(SeqId)>& is_running);

  const std::vector<BlockSnap>& blocks(int32_t group) const { return blocks_[static_cast<size_t>(group)]; }
  const BlockTotals& totals(int32_t group) const { return totals_[static_cast<size_t>(group)]; }
  const std::deque<BlockEvent>& history() const { return history_; }
  std::vector<BlockEvent> take_unpublished() { return std::exchange(unpublished_, {}); }
  std::vector<BlockEvent> take_unread() { return std::exchange(unread_, {}); }
  // The events and hash changes of the last record() alone.
  const std::vector<BlockEvent>& last_recorded() const { return last_; }
  const std::vector<HashChange>& last_hash_changes() const { return hash_changes_; }

 private:
  size_t max_events_;
  std::vector<std::vector<BlockSnap>> blocks_;  // [group][block]: states as of the last record()
  std::vector<BlockTotals> totals_;             // [group]
  std::vector<BlockChange> changes_;            // scratch
  std::vector<BlockEvent> scheduler_events_;
  std::deque<BlockEvent> history_;       // the newest max_events
  std::vector<BlockEvent> unpublished_;  // since the last snapshot was built
  std::vector<BlockEvent> unread_;       // since the last take_unread()
  std::vector<BlockEvent> last_;
  std::vector<HashChange> hash_changes_;
  void note_hash_change(int32_t group, const BlockSnap& before, const BlockSnap& now);
};

}  // namespace kvscope
