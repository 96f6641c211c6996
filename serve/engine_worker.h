#pragma once
// `kvscope-cli serve`'s engine thread: owns the Engine and steps it, taking requests from a
// ServingQueue between steps, so every request joins the same continuous batch. HTTP threads
// never touch the Engine (see serving_queue.h; the window's Serve toggle drives the same queue
// from its own engine thread instead).
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "serve/serving_queue.h"

namespace kvscope::serve {

class EngineWorker {
 public:
  EngineWorker(std::unique_ptr<Engine> engine, WorkerLimits limits);
  ~EngineWorker();  // stops the thread; unfinished requests end with "the server is shutting down"
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  ServingQueue& queue() { return queue_; }  // what the HTTP server submits to (thread-safe)
  // Shorthands for the queue's thread-safe side.
  std::shared_ptr<RequestChannel> submit(GenerationJob job) { return queue_.submit(std::move(job)); }
  void cancel(const std::shared_ptr<RequestChannel>& ch) { queue_.cancel(ch); }
  ServeMetrics metrics() const { return queue_.metrics(); }
  SnapshotPtr latest_snapshot() const { return engine_->latest_snapshot(); }  // any thread
  const EngineConfig& config() const { return engine_->config(); }            // fixed after construction
  // Called on the engine thread after every step (the KV event publisher reads the cache there).
  void set_step_observer(std::function<void(const Engine&)> observer);

 private:
  void loop();

  std::unique_ptr<Engine> engine_;
  ServingQueue queue_;
  std::mutex mu_;  // guards stop_, woken_, observer_
  std::condition_variable cv_;
  bool stop_ = false, woken_ = false;
  std::function<void(const Engine&)> observer_;
  std::thread thread_;
};

}  // namespace kvscope::serve
