#pragma once
// The engine step loop: schedule -> build the batch -> forward -> postprocess (sample, finish)
// -> publish (block events, snapshot). Single-threaded by design: the caller (CLI loop or the UI's worker
// thread) calls step(); only the backend uses worker threads inside a step.
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/batch_builder.h"
#include "engine/block_event_recorder.h"
#include "engine/engine_config.h"
#include "engine/kv_setup.h"
#include "engine/request_record.h"
#include "engine/request_story_recorder.h"
#include "engine/scheduler.h"
#include "engine/token_eviction.h"
#include "kv/contiguous_kv_manager.h"
#include "kv/hybrid_kv_manager.h"
#include "model/model.h"
#include "telemetry/snapshot.h"
#include "telemetry/snapshot_slot.h"

namespace kvscope {

struct EngineCallbacks {
  std::function<void(SeqId, TokenId)> on_token;  // called inside step()
  std::function<void(SeqId)> on_finished;
};

class Engine {
 public:
  using Clock = std::chrono::steady_clock;
  // Throws std::invalid_argument on a bad config (block size, empty pool...).
  Engine(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend, const EngineConfig& cfg);
  ~Engine();

  SeqId submit(const Request& r);
  // n > 1 parallel samples of one prompt: the prompt is computed once, then the samples fork
  // from it sharing every block (the partly filled last one is copied on write). Returns the
  // n ids (the first is the parent); sample i uses seed + i.
  std::vector<SeqId> submit_parallel(const Request& r, int n);
  void cancel(SeqId id);
  bool step();  // false when there was nothing to do
  void run_until_idle();
  bool has_work() const;

  const Sequence& sequence(SeqId id) const;
  const std::vector<std::vector<float>>& recorded_logits(SeqId id) const;
  // [prompt position][n_vocab]: row i predicts prompt token i + 1 (record_prompt_logits).
  const std::vector<std::vector<float>>& recorded_prompt_logits(SeqId id) const;
  // The engine's state now: the published snapshot, first brought up to date (built and
  // published) when something changed since, e.g. a submit(), or every step with
  // publish_every_step off. Call it on the thread that drives the engine; the returned snapshot
  // is immutable and may be handed to any thread. Snapshot::events holds the block events since
  // the previous snapshot was built (with publish_every_step: those of its step).
  SnapshotPtr snapshot() const;
  // The newest published snapshot, from any thread, at any time: one pointer copy, so a slow
  // reader never holds up a step and never sees a half-built state.
  SnapshotPtr latest_snapshot() const { return published_.load(); }
  // Block events recorded since the last call (at least the newest max_events), without building a
  // snapshot: for a consumer that must see every event but reads snapshots at its own pace.
  std::vector<BlockEvent> take_new_events() { return recorder_->take_unread(); }
  std::vector<BlockEvent> events_since(uint64_t step) const;
  void set_callbacks(EngineCallbacks cb) { callbacks_ = std::move(cb); }

  // Every request's KV story (engine/request_story.h): the live ones and a bounded history.
  const RequestStoryLog& stories() const { return *stories_->log(); }
  std::shared_ptr<RequestStoryLog> story_log() const { return stories_->log(); }
  uint64_t story_engine() const { return stories_->engine(); }  // this engine's serial in the log
  // Continue an earlier engine's log (call before submitting): later lookups can then compare
  // with that engine's requests (a prefix cached under another KV dtype, MissReason::SaltDiffers).
  void use_story_log(std::shared_ptr<RequestStoryLog> log) { stories_->use_log(std::move(log)); }

  const EngineConfig& config() const { return cfg_; }
  const Model& model() const { return *model_; }
  Backend& backend() { return *backend_; }
  const KvSlotAllocator& kv() const { return *kv_; }
  // A hybrid recurrent model's state slots and checkpoints; null for other models.
  const StateSlotManager* state_slots() const { return kv_setup_.state_slots; }
  // The concrete allocator, for tests and inspection (the engine itself only uses kv()).
  const KvCacheManager* paged_kv() const;            // null in baseline mode; group 0 if hybrid
  const HybridKvManager* hybrid_kv() const;          // null unless the hybrid KV cache is on
  const ContiguousKvManager* contiguous_kv() const;  // null when paged
  void validate_kv() const { kv_->validate(); }      // every KV manager's invariants (both groups when hybrid)
  // "KV cache: N blocks = T tokens = X MiB, max concurrency at context C"; with the hybrid KV
  // cache one clause per group ("global N blocks ..., sliding M blocks ...").
  std::string kv_summary() const;

 private:
  using Requests = std::unordered_map<SeqId, std::unique_ptr<RequestRecord>>;
  // step(), in order:
  void apply_scheduler_verdicts(const SchedulerOutput& out);  // rejections, length caps, preemptions
  const std::vector<float>& forward(const SchedulerOutput& out, StepBatch& batch);  // into logits_
  void postprocess(const SchedulerOutput& out, const StepBatch& batch, const std::vector<float>& logits);
  void sample_next(RequestRecord& rt, std::span<const float> logits, Clock::time_point now);
  void record_scheduler_events(const SchedulerOutput& out);
  // After every change of state (step, cancel): prune old sequences, record the block events,
  // then publish a snapshot (publish_every_step) or mark the published one stale.
  void publish_step();
  void publish_snapshot() const;
  // The one place a request ends: the scheduler finishes it (frees its KV), the engine counts
  // it and tells the callbacks. No-op for a sequence that is already finished.
  void finish(RequestRecord& rt, SeqState state, FinishReason reason);
  void count_finished(RequestRecord& rt);
  std::optional<StoryReasoning> reasoning_of(const RequestRecord& rt) const;
  std::vector<RequestRecord*> fork_children(RequestRecord& parent);
  void end_unforked_children(RequestRecord& parent);
  RequestRecord& record(SeqId id);
  const RequestRecord& record(SeqId id) const;

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  EngineConfig cfg_;
  KvSetup kv_setup_;
  KvSlotAllocator* kv_ = nullptr;  // kv_setup_.kv
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<BlockEventRecorder> recorder_;
  std::unique_ptr<RequestStoryRecorder> stories_;
  std::unique_ptr<TokenEvictor> evictor_;  // --evict only
  double now_ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - start_).count(); }
  Requests requests_;
  SeqId next_id_ = 1;
  uint64_t arrival_counter_ = 0;
  EngineCounters counters_;
  std::vector<float> logits_;  // the last step's logits (forward), reused across steps
  EngineCallbacks callbacks_;
  Clock::time_point start_;
  std::deque<std::pair<double, uint64_t>> rate_window_;  // (time, tokens decoded) for tokens/s
  double last_step_ms_ = 0;
  mutable SnapshotSlot published_;      // swapped whole; readers on any thread
  mutable bool snapshot_stale_ = true;  // engine thread only
};

}  // namespace kvscope
