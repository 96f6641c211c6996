#pragma once
// The snapshot hand-off between the engine's thread and the UI's. Snapshots cross through this
// queue, not as queued signal arguments: Qt orders a queued argument's copy with a futex that
// ThreadSanitizer cannot see, so the GUI's read of the pointer was reported as a race now and
// then (the copying side's stack lost); a std::mutex is visible to it. A FIFO, so snapshots and
// streamed text keep their order.
#include <deque>
#include <mutex>
#include <utility>

#include "engine_bridge/ui_types.h"

namespace kvscope::ui {

class FrameQueue {
 public:
  void push(SnapshotPtr snap, EventBatch events) {
    std::lock_guard<std::mutex> lk(mu_);
    frames_.emplace_back(std::move(snap), std::move(events));
  }
  // The oldest frame nobody took yet; empty pointers when none is waiting.
  std::pair<SnapshotPtr, EventBatch> take() {
    std::lock_guard<std::mutex> lk(mu_);
    if (frames_.empty()) return {};
    auto frame = std::move(frames_.front());
    frames_.pop_front();
    return frame;
  }

 private:
  std::mutex mu_;
  std::deque<std::pair<SnapshotPtr, EventBatch>> frames_;
};

}  // namespace kvscope::ui
