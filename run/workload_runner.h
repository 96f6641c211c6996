#pragma once
// Replays a Workload through an Engine step by step: submits each request once its arrival
// step and arrival time have come (n parallel samples through submit_parallel), chains
// conversation turns (turn t+1's prompt = turn t's full token sequence + the new text, so prefix
// caching can reuse it), and accumulates the run's memory and speed metrics from the engine's
// snapshots. The one replay core of `kvscope-cli run` (run_to_completion) and of the GUI's
// EngineWorker (step() from its own loop, hooks to follow what was submitted).
//
// run/ is the layer above the engine and the backends (built from backends/' factory): it may
// include core/, cpu/ and backends/, and nothing below it includes run/.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "workload/workload.h"

namespace kvscope {

struct RequestResult {
  std::string id;
  std::vector<SeqId> seqs;  // n > 1: one per sample
  SeqState state = SeqState::Waiting;
  std::vector<TokenId> prompt;
  std::vector<TokenId> tokens;  // generated ids (first sample)
  int32_t cached_prompt_tokens = 0;
  double ttft_ms = -1;
  int32_t preemptions = 0;
  std::string error;
};

struct RunMetrics {
  uint64_t steps = 0;
  double wall_s = 0;
  double waste_pct = 0;             // 100 * (1 - slots_filled / slots_reserved)
  int64_t slots_reserved = 0;       // reserved slots summed over all steps (slot-steps)
  int64_t slots_filled = 0;         // filled slots summed over all steps
  int64_t peak_slots_reserved = 0;  // the most reserved in one step
  int64_t peak_slots_filled = 0;    // the most filled in one step
  double peak_waste_pct = 0;        // the worst single step
  int64_t largest_free_run = 0;     // slots, at the step with the most memory reserved
  int64_t total_free_at_peak = 0;
  double external_fragmentation = 0;  // the worst step (1 - largest_free_run / total_free)
  int64_t peak_kv_bytes = 0;          // reserved KV bytes at the peak
  int32_t peak_blocks_used = 0;
  int32_t max_concurrent = 0;  // most sequences running in one step
  uint64_t preemptions = 0;
  uint64_t rejected = 0;
  uint64_t generated_tokens = 0;
  uint64_t prefill_tokens = 0;  // prompt tokens actually computed
  double tokens_per_s = 0;      // generated tokens / wall time
  uint64_t prefix_cache_queries_tokens = 0;
  uint64_t prefix_cache_hits_tokens = 0;
  uint64_t evictions = 0;
  // Baseline only (kv/contiguous_kv_manager.h BaselineCounters), totals over the run:
  uint64_t overflows = 0;  // a sequence outgrew its reservation
  uint64_t grown_in_place = 0;
  uint64_t relocations = 0;
  uint64_t relocated_slots = 0;                 // K/V slots those moves copied
  uint64_t overflow_preemptions = 0;            // preempted while it could not grow
  uint64_t blocked_admission_steps = 0;         // steps the queue's head found no long enough run
  uint64_t blocked_by_fragmentation_steps = 0;  // ... although the free slots in all sufficed
  uint64_t failed_reservations = 0;
  double mean_ttft_ms = 0;
  int64_t kv_pool_bytes = 0;
  // Hybrid recurrent models (kv/state_checkpoint_pool.h): the state pool and its checkpoints as
  // the last snapshot saw them (without the list of checkpoints), and the most held at once.
  StatePoolCounts state;
  int32_t peak_checkpoints_held = 0;
};

// What a driver that runs its own loop (the GUI's worker) learns from the runner, called on the
// thread that calls step().
struct WorkloadRunnerHooks {
  // A request went into the engine as `submitted` (its prompt with the conversation's history
  // prepended): `seqs` holds one id, or n for n parallel samples.
  std::function<void(const WorkloadRequest& request, const Request& submitted, const std::vector<SeqId>& seqs)>
      on_submitted;
  // A request that will never be submitted: its conversation broke off, its prompt could not be
  // built, or drop_pending() gave up on it.
  std::function<void(const WorkloadRequest& request)> on_skipped;
};

struct WorkloadRunnerOptions {
  // The longest one step() sleeps while it waits for a request's arrival_s; a caller with a
  // message loop to serve between steps asks for short slices.
  double max_wait_s = 0.05;
  WorkloadRunnerHooks hooks;
};

class WorkloadRunner {
 public:
  WorkloadRunner(Engine& engine, Workload workload, WorkloadRunnerOptions options = {});
  // Submits what is due and runs one engine step (or waits a slice for a request's time);
  // false once every request is done and the engine has nothing left to do.
  bool step();
  // Steps until done, or until *stop becomes true (it may be set from any thread).
  void run_to_completion(const std::atomic<bool>* stop = nullptr);
  // Gives up on every request not submitted yet (each reported to on_skipped); those already in
  // the engine run on. Their results say why.
  void drop_pending();
  bool done() const;
  double progress() const;  // finished requests / all requests
  const RunMetrics& metrics() const { return metrics_; }
  std::vector<RequestResult> results() const;
  nlohmann::json to_json() const;  // metrics + per-request results

 private:
  void submit_due();
  void skip(size_t i, std::string why);  // request i is done without ever being submitted
  double elapsed_s() const;              // wall time since the first step()
  void observe(const Snapshot& s);
  // Copies the result of every request whose sequences all finished: the engine prunes
  // finished sequences after a while, and a long run (the contiguous baseline runs few requests
  // at a time) must not lose its early requests' tokens.
  void harvest(const Snapshot* s);
  RequestResult result_from_engine(size_t i, const Snapshot* s) const;

  Engine& engine_;
  Workload wl_;
  WorkloadRunnerOptions opt_;
  std::vector<bool> submitted_;
  std::vector<std::string> skipped_why_;             // per request: why it was never submitted
  std::vector<std::vector<SeqId>> seq_of_;           // per request
  std::vector<std::optional<RequestResult>> final_;  // per request, once all its sequences finished
  std::map<std::string, size_t> last_turn_;          // conversation -> index of its latest submitted turn
  uint64_t step_ = 0;
  int64_t peak_reserved_slots_ = -1;
  std::chrono::steady_clock::time_point start_;
  bool started_ = false;
  RunMetrics metrics_;
};

nlohmann::json run_metrics_json(const RunMetrics& m);

}  // namespace kvscope
