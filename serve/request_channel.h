#pragma once
// One request's mailbox between the engine thread (producer) and the HTTP thread serving it
// (consumer). Only this small queue is locked, never the engine: the HTTP thread waits here
// while the engine thread keeps stepping every other request.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "serve/generation_job.h"

namespace kvscope::serve {

class RequestChannel {
 public:
  void push(ChannelItem item) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
  }
  // Everything queued so far; waits up to `timeout` when nothing is (returns empty then).
  std::vector<ChannelItem> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return !items_.empty(); });
    std::vector<ChannelItem> out(std::make_move_iterator(items_.begin()), std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }
  // Set by the HTTP side when its client went away; the engine thread then cancels.
  bool cancel_requested() const { return cancel_.load(); }
  void request_cancel() { cancel_.store(true); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChannelItem> items_;
  std::atomic<bool> cancel_{false};
};

}  // namespace kvscope::serve
