#pragma once
// Timed replay (--timed): requests arrive at their trace timestamps, are routed to an instance,
// and run there under the engine's own Scheduler (FCFS admission into a token budget, chunked
// prefill, preemption by recompute when the pool runs dry) over the instance's prefix cache and
// optional CPU tier. No model runs: each step of an instance takes the time the cost model
// (run/replay_cost.h) gives its work, so an instance is an event stream of "step done" times
// merged with the arrivals. A request holds its blocks from admission until its last output
// token. Output tokens get ids no prompt uses, so only prompts share blocks.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler_config.h"
#include "run/replay_cost.h"
#include "run/replay_fleet.h"

namespace kvscope {

struct TimedOptions {
  CostModel cost;
  int32_t max_running = 256;          // vLLM's max_num_seqs
  int32_t max_batched_tokens = 8192;  // vLLM's max_num_batched_tokens (chunked prefill budget)
  int32_t pool_samples = 400;         // points of the pool-use series over the trace's duration
};

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
Percentiles percentiles(std::vector<double> v);

struct PoolSample {
  double t = 0;                  // seconds since the first arrival
  std::vector<double> used;      // per instance: blocks held by requests / pool blocks
  std::vector<int32_t> running;  // per instance
  std::vector<int32_t> waiting;
};

struct TimedInstanceStats {
  InstanceStats cache;
  uint64_t preemptions = 0;
  int64_t rejected = 0;  // can never fit the pool
  int64_t steps = 0;
  double busy_s = 0;      // time spent in steps
  double transfer_s = 0;  // of which CPU-tier loads
};

struct TimedResult {
  std::vector<TimedInstanceStats> instances;
  TimedInstanceStats total;
  Percentiles ttft_s, queue_s, e2e_s, tpot_s;  // queue: arrival to first admission
  int64_t finished = 0;
  double makespan_s = 0;  // first arrival to last token
  std::vector<PoolSample> pool;
};

// Throws std::invalid_argument on a bad option (CostModel::check, fleet), TraceError on a block
// size that does not divide the trace's.
TimedResult timed_replay(std::span<const TraceRequest> reqs, const FleetOptions& fleet, const ReplayOptions& opt,
                         const TimedOptions& timed);

}  // namespace kvscope
