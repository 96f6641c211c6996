#pragma once
// Replays a Workload through an Engine step by step (so the CLI loop and the UI's worker can
// both drive it): submits each request at its arrival step, chains conversation turns (turn
// t+1's prompt = turn t's full token sequence + the new text, so prefix caching can reuse it),
// and accumulates the run's memory and speed metrics from the engine's snapshots.
#include <chrono>
#include <cstdint>
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
  std::vector<SeqId> seqs;            // n > 1: one per sample
  SeqState state = SeqState::Waiting;
  std::vector<TokenId> prompt;
  std::vector<TokenId> tokens;        // generated ids (first sample)
  int32_t cached_prompt_tokens = 0;
  double ttft_ms = -1;
  int32_t preemptions = 0;
  std::string error;
};

struct RunMetrics {
  uint64_t steps = 0;
  double wall_s = 0;
  double waste_pct = 0;               // 100 * (1 - slots_filled / slots_reserved)
  int64_t slots_reserved = 0;         // reserved slots summed over all steps (slot-steps)
  int64_t slots_filled = 0;           // filled slots summed over all steps
  int64_t peak_slots_reserved = 0;    // the most reserved in one step
  int64_t peak_slots_filled = 0;      // the most filled in one step
  double peak_waste_pct = 0;          // the worst single step
  int64_t largest_free_run = 0;       // slots, at the step with the most memory reserved
  int64_t total_free_at_peak = 0;
  double external_fragmentation = 0;  // the worst step (1 - largest_free_run / total_free)
  int64_t peak_kv_bytes = 0;          // reserved KV bytes at the peak
  int32_t peak_blocks_used = 0;
  int32_t max_concurrent = 0;         // most sequences running in one step
  uint64_t preemptions = 0;
  uint64_t rejected = 0;
  uint64_t generated_tokens = 0;
  uint64_t prefill_tokens = 0;        // prompt tokens actually computed
  double tokens_per_s = 0;            // generated tokens / wall time
  uint64_t prefix_cache_queries_tokens = 0;
  uint64_t prefix_cache_hits_tokens = 0;
  uint64_t evictions = 0;
  // Baseline only (kv/contiguous_kv_manager.h BaselineCounters), totals over the run:
  uint64_t overflows = 0;             // a sequence outgrew its reservation
  uint64_t grown_in_place = 0;
  uint64_t relocations = 0;
  uint64_t relocated_slots = 0;       // K/V slots those moves copied
  uint64_t overflow_preemptions = 0;  // preempted while it could not grow
  uint64_t blocked_admission_steps = 0;         // steps the queue's head found no long enough run
  uint64_t blocked_by_fragmentation_steps = 0;  // ... although the free slots in all sufficed
  uint64_t failed_reservations = 0;
  double mean_ttft_ms = 0;
  int64_t kv_pool_bytes = 0;
};

class WorkloadRunner {
 public:
  WorkloadRunner(Engine& engine, Workload workload);
  // Submits what is due and runs one engine step; false once every request is done.
  bool step();
  void run_to_completion();
  bool done() const;
  double progress() const;            // finished requests / all requests
  const RunMetrics& metrics() const { return metrics_; }
  std::vector<RequestResult> results() const;
  nlohmann::json to_json() const;     // metrics + per-request results

 private:
  void submit_due();
  double elapsed_s() const;  // wall time since the first step()
  void observe(const Snapshot& s);
  // Copies the result of every request whose sequences all finished: the engine prunes
  // finished sequences after a while, and a long run (the contiguous baseline runs few requests
  // at a time) must not lose its early requests' tokens.
  void harvest(const Snapshot* s);
  RequestResult result_from_engine(size_t i, const Snapshot* s) const;

  Engine& engine_;
  Workload wl_;
  std::vector<bool> submitted_;
  std::vector<std::vector<SeqId>> seq_of_;     // per request
  std::vector<std::optional<RequestResult>> final_;  // per request, once all its sequences finished
  std::map<std::string, size_t> last_turn_;    // conversation -> index of its latest submitted turn
  uint64_t step_ = 0;
  int64_t peak_reserved_slots_ = -1;
  std::chrono::steady_clock::time_point start_;
  bool started_ = false;
  RunMetrics metrics_;
};

nlohmann::json run_metrics_json(const RunMetrics& m);

}  // namespace kvscope
