#pragma once
// Where the engine publishes its newest snapshot for readers on any thread. A mutex guards
// only the pointer itself, held for one shared_ptr copy (reader) or swap (engine): a few
// nanoseconds, never while a snapshot is built or freed (the replaced one is released after
// the lock), so neither side waits on the other's work and a reader never sees a half-built
// state. Not std::atomic<std::shared_ptr>: libstdc++ 12 (Debian 12's GCC) unlocks its load()
// with a relaxed store, which is a data race by the C++ memory model (ThreadSanitizer reports
// it, see google/sanitizers#1558), although x86 hardware hides it.
#include <mutex>

#include "telemetry/snapshot.h"

namespace kvscope {

class SnapshotSlot {
 public:
  SnapshotPtr load() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ptr_;
  }
  void store(SnapshotPtr p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ptr_.swap(p);
    }
    // p, the previous snapshot, is released here: outside the lock.
  }

 private:
  mutable std::mutex mu_;
  SnapshotPtr ptr_;
};

}  // namespace kvscope
