#pragma once
// The one thread that owns and steps the Engine. HTTP threads never touch the Engine: they
// submit a GenerationJob through a locked inbox and get a RequestChannel back, on which the
// engine thread posts tokens and the finish. Between steps the engine thread takes new jobs
// and cancellations, so every request joins the same continuous batch.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "model/tokenizer.h"
#include "serve/request_channel.h"
#include "serve/serve_metrics.h"

namespace kvscope::serve {

struct WorkerLimits {
  int32_t max_queued = 256;  // sequences submitted and not yet finished, beyond which new jobs are refused
};

class EngineWorker {
 public:
  EngineWorker(std::unique_ptr<Engine> engine, WorkerLimits limits);
  ~EngineWorker();  // stops the thread; unfinished requests are cancelled
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  // Thread-safe. Throws ApiError(503) when max_queued sequences are already in flight.
  std::shared_ptr<RequestChannel> submit(GenerationJob job);
  // Thread-safe: the client went away; its sequences are cancelled (blocks freed) between steps.
  void cancel(const std::shared_ptr<RequestChannel>& ch);

  SnapshotPtr latest_snapshot() const { return engine_->latest_snapshot(); }  // any thread
  const EngineConfig& config() const { return engine_->config(); }           // fixed after construction
  // A copy of the per-request numbers, for /metrics.
  ServeMetrics metrics() const;
  std::string kv_summary() const { return kv_summary_; }
  // Called on the engine thread after every step (the KV event publisher reads the cache there).
  void set_step_observer(std::function<void(const Engine&)> observer);

 private:
  struct Pending {
    GenerationJob job;
    std::shared_ptr<RequestChannel> ch;
  };
  struct Choice;  // one sequence of a request
  void loop();
  void start_job(Pending& p);
  void on_token(SeqId id, TokenId t);
  void on_finished(SeqId id);
  void finish_choice(Choice& c, const std::string& reason, const std::string& error);
  void check_idle();

  std::unique_ptr<Engine> engine_;
  const Tokenizer& tok_;
  WorkerLimits limits_;
  std::string kv_summary_;

  mutable std::mutex mu_;              // guards inbox_, cancels_, stop_, observer_
  std::condition_variable cv_;
  std::vector<Pending> inbox_;
  std::vector<std::shared_ptr<RequestChannel>> cancels_;
  bool stop_ = false;
  std::atomic<int32_t> in_flight_{0};  // sequences submitted and not finished

  mutable std::mutex metrics_mu_;
  ServeMetrics metrics_;

  // Engine thread only.
  std::unordered_map<SeqId, std::unique_ptr<Choice>> choices_;
  std::unordered_map<RequestChannel*, std::vector<SeqId>> by_channel_;
  std::vector<SeqId> stop_string_hits_;  // finished by a stop string during the step: cancel after it
  std::function<void(const Engine&)> observer_;
  bool was_busy_ = false;
  std::thread thread_;
};

}  // namespace kvscope::serve
