#pragma once
// The requests side of serving, apart from who steps the engine: HTTP threads submit a
// GenerationJob through a locked inbox and get a RequestChannel back; the thread that owns the
// Engine (the CLI's EngineWorker thread, or the window's engine QThread) calls intake() between
// steps, routes the engine's token and finish callbacks here, and the tokens and finishes go out
// on the channels. So `kvscope-cli serve` and the window's Serve toggle share one request path,
// and a window serving its own engine shows external requests beside its chats.
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "serve/request_channel.h"
#include "serve/serve_metrics.h"
#include "serve/traffic_recorder.h"

namespace kvscope::serve {

struct WorkerLimits {
  int32_t max_queued = 256;  // sequences submitted and not yet finished, beyond which new jobs are refused
};

class ServingQueue {
 public:
  explicit ServingQueue(WorkerLimits limits);
  ~ServingQueue();
  ServingQueue(const ServingQueue&) = delete;
  ServingQueue& operator=(const ServingQueue&) = delete;

  // ---- any thread ----
  // Throws ApiError(503) when max_queued sequences are already in flight or after close().
  // With no engine attached (the window is building one) the job waits for the next one.
  std::shared_ptr<RequestChannel> submit(GenerationJob job);
  // The client went away: its sequences are cancelled (blocks freed) at the next intake().
  void cancel(const std::shared_ptr<RequestChannel>& ch);
  ServeMetrics metrics() const;
  // The attached engine's latest snapshot, or the last one it published before it detached.
  SnapshotPtr latest_snapshot() const;
  // Called after every submit and cancel, so an idle engine thread wakes up. Runs on the HTTP
  // thread, never after set_wake({}) or close() has returned.
  void set_wake(std::function<void()> wake);
  // No more requests: new ones get 503, queued ones and every running one finish at once with
  // "the server is shutting down" (so no HTTP thread waits on an engine that will not answer).
  // The engine thread still has to detach() to free the running ones' blocks.
  void close();

  // ---- the engine's thread only ----
  // serve --record: every served sequence from now on gets a line (serve/traffic_recorder.h).
  void set_recorder(std::shared_ptr<TrafficRecorder> r) { recorder_ = std::move(r); }
  // The engine that serves from now on (its config sets the prefill histogram's buckets).
  void attach(Engine& engine);
  // The engine goes away (rebuilt with new settings, or serving stops): every served sequence
  // is cancelled on it and its request finishes with `why`.
  void detach(const std::string& why);
  // Starts queued jobs and applies cancels; true when it changed anything.
  bool intake();
  // The engine's callbacks: false when the sequence is not a served one.
  bool on_token(SeqId id, TokenId t);
  bool on_finished(SeqId id);
  // After each step: sequences whose text hit a stop string inside the step are cancelled
  // (true when there were any).
  bool after_step();
  // When the engine has gone idle after work: validate_kv() once per busy period.
  void on_idle();

 private:
  struct Pending {
    GenerationJob job;
    std::shared_ptr<RequestChannel> ch;
  };
  struct Choice;  // one sequence of a request
  void start_job(Pending& p);
  void refuse_cancelled(Pending& p);
  void finish_left(const std::string& why);
  void forget(Choice& c, SeqId id);

  WorkerLimits limits_;

  mutable std::mutex mu_;  // guards inbox_, cancels_, closed_, open_ and snapshot_source_
  std::vector<Pending> inbox_;
  std::vector<std::shared_ptr<RequestChannel>> cancels_;
  bool closed_ = false;
  // Requests handed out and not finished, with their choice count: close() answers them.
  std::unordered_map<RequestChannel*, std::pair<std::shared_ptr<RequestChannel>, int>> open_;
  const Engine* snapshot_source_ = nullptr;
  SnapshotPtr last_snapshot_;
  std::atomic<int32_t> in_flight_{0};  // sequences submitted and not finished

  std::mutex wake_mu_;  // held while the wake runs, so set_wake({}) waits for a running one
  std::function<void()> wake_;
  void wake();

  mutable std::mutex metrics_mu_;
  ServeMetrics metrics_;

  // Engine thread only.
  Engine* engine_ = nullptr;
  std::unordered_map<SeqId, std::unique_ptr<Choice>> choices_;
  std::unordered_map<RequestChannel*, std::vector<SeqId>> by_channel_;
  std::vector<SeqId> stop_string_hits_;
  std::shared_ptr<TrafficRecorder> recorder_;
  bool was_busy_ = false;
};

}  // namespace kvscope::serve
