#include "serve/engine_worker.h"

#include <chrono>

namespace kvscope::serve {

EngineWorker::EngineWorker(std::unique_ptr<Engine> engine, WorkerLimits limits)
    : engine_(std::move(engine)), queue_(limits) {
  engine_->set_callbacks(
      {[this](SeqId id, TokenId t) { queue_.on_token(id, t); }, [this](SeqId id) { queue_.on_finished(id); }});
  queue_.attach(*engine_);
  queue_.set_wake([this] {
    {
      std::lock_guard<std::mutex> lk(mu_);
      woken_ = true;
    }
    cv_.notify_all();
  });
  thread_ = std::thread([this] { loop(); });
}

EngineWorker::~EngineWorker() {
  queue_.close();  // answers every waiting HTTP thread; no wake runs after this
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineWorker::set_step_observer(std::function<void(const Engine&)> observer) {
  std::lock_guard<std::mutex> lk(mu_);
  observer_ = std::move(observer);
}

void EngineWorker::loop() {
  for (;;) {
    std::function<void(const Engine&)> observer;
    const bool idle = !engine_->has_work();
    if (idle) queue_.on_idle();
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (idle) cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return stop_ || woken_; });
      woken_ = false;
      if (stop_) break;
      observer = observer_;
    }
    bool changed = queue_.intake();
    if (engine_->has_work()) {
      engine_->step();
      changed = true;
    }
    if (changed) changed |= queue_.after_step();
    if (!engine_->config().publish_every_step) engine_->snapshot();
    if (observer && changed) observer(*engine_);
  }
  queue_.detach("the server is shutting down");  // frees the blocks of what was still running
}

}  // namespace kvscope::serve
