#include "telemetry/block_events.h"

namespace kvscope {

const char* block_event_name(BlockEventKind k) {
  switch (k) {
    case BlockEventKind::Allocated:
      return "allocated";
    case BlockEventKind::Freed:
      return "freed";
    case BlockEventKind::Shared:
      return "shared";
    case BlockEventKind::CopiedOnWrite:
      return "copied_on_write";
    case BlockEventKind::Cached:
      return "cached";
    case BlockEventKind::CacheHit:
      return "cache_hit";
    case BlockEventKind::Evicted:
      return "evicted";
    case BlockEventKind::Preempted:
      return "preempted";
    case BlockEventKind::DroppedOutOfWindow:
      return "dropped_out_of_window";
  }
  return "?";
}

void diff_block(const BlockSnap& prev, const BlockSnap& a, BlockId b, uint64_t step, std::vector<BlockEvent>& out) {
  auto emit = [&](BlockEventKind k, SeqId seq) {
    BlockEvent e;
    e.step = step;
    e.kind = k;
    e.block = b;
    e.seq = seq;
    out.push_back(e);
  };
  if (prev.status == a.status) {
    if (a.status == BlockStatus::Used && a.ref_count > prev.ref_count) emit(BlockEventKind::Shared, a.owner);
    if (a.status == BlockStatus::Used && prev.hashed && a.hashed && prev.hash != a.hash)
      emit(BlockEventKind::Evicted, a.owner);
    return;
  }
  switch (a.status) {
    case BlockStatus::Used:
      if (prev.status == BlockStatus::Cached && a.hashed && a.hash == prev.hash) {
        emit(BlockEventKind::CacheHit, a.owner);
      } else {
        if (prev.status == BlockStatus::Cached) emit(BlockEventKind::Evicted, a.owner);
        emit(BlockEventKind::Allocated, a.owner);
      }
      break;
    case BlockStatus::Cached:
      emit(BlockEventKind::Cached, prev.owner);
      break;
    case BlockStatus::Free:
      emit(prev.status == BlockStatus::Cached ? BlockEventKind::Evicted : BlockEventKind::Freed, prev.owner);
      break;
  }
}

std::vector<BlockEvent> diff_block_events(const std::vector<BlockSnap>& before, const std::vector<BlockSnap>& after,
                                          uint64_t step) {
  std::vector<BlockEvent> out;
  for (size_t i = 0; i < after.size(); ++i)
    diff_block(i < before.size() ? before[i] : BlockSnap{}, after[i], static_cast<BlockId>(i), step, out);
  return out;
}

std::string describe_block_event(const BlockEvent& e) {
  // The hybrid KV cache's second pool holds the sliding-window layers' blocks.
  const std::string blk = (e.group == 1 ? "sliding-layer block " : "block ") + std::to_string(e.block);
  const std::string seq = e.seq >= 0 ? "sequence " + std::to_string(e.seq) : "no sequence";
  switch (e.kind) {
    case BlockEventKind::Allocated:
      return seq + " needed room for more tokens, so it took free " + blk + ".";
    case BlockEventKind::Freed:
      return blk + " was released by " + seq + " and is free again.";
    case BlockEventKind::Shared:
      return blk + " is now shared: another sequence points at the same K/V instead of copying it.";
    case BlockEventKind::CopiedOnWrite:
      return "A shared, partly filled block " + std::to_string(e.other) + " was copied to " + blk +
             " before a sequence wrote into it (copy-on-write).";
    case BlockEventKind::Cached:
      return blk + " is no longer used, but its full K/V stay in the prefix cache until the space is needed.";
    case BlockEventKind::CacheHit:
      return seq + " found its prefix in the cache and reuses " + blk + " without recomputing it.";
    case BlockEventKind::Evicted:
      return "The pool ran low, so cached " + blk + " was evicted and its contents forgotten.";
    case BlockEventKind::Preempted:
      return "The pool ran out: " + seq + " was preempted; its blocks were freed and it will be recomputed later.";
    case BlockEventKind::DroppedOutOfWindow:
      return blk + " fell out of the sliding window and was released.";
  }
  return blk;
}

}  // namespace kvscope
