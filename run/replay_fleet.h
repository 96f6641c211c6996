#pragma once
// Replay across a fleet of instances and two KV tiers, untimed (one request at a time, as
// run/trace_replay.h): each request is routed (run/replay_router.h) to an instance with its
// own GPU block pool and prefix cache, and optionally a CPU tier behind it
// (run/replay_tier.h). Without time there is no queue, so an instance's load is the prompt
// tokens it has computed so far (misses): least-loaded balances compute, prefix-aware trades
// that against cached prefix. Timed mode (run/timed_replay.h) uses queued work instead.
#include <cstdint>
#include <span>
#include <vector>

#include "run/replay_router.h"
#include "run/trace_replay.h"

namespace kvscope {

struct FleetOptions {
  int32_t instances = 1;
  RouterKind router = RouterKind::RoundRobin;
  int64_t gpu_tokens = 0;  // per instance; 0: unbounded (a pool that never evicts)
  int64_t cpu_tokens = 0;  // per instance CPU tier; 0: none
};

struct InstanceStats {
  int32_t pool_blocks = 0;
  int64_t requests = 0;
  uint64_t prompt_tokens = 0;
  uint64_t gpu_hit_tokens = 0;
  uint64_t cpu_hit_tokens = 0;
  uint64_t evictions = 0;      // GPU blocks whose hash was dropped (to the CPU tier when there is one)
  uint64_t cpu_evictions = 0;  // hashes the CPU tier dropped
  int64_t truncated_requests = 0;
  double hit_ratio() const {
    return prompt_tokens == 0
               ? 0.0
               : static_cast<double>(gpu_hit_tokens + cpu_hit_tokens) / static_cast<double>(prompt_tokens);
  }
  void add(const InstanceStats& o);
};

struct FleetResult {
  std::vector<InstanceStats> instances;
  InstanceStats total;  // pool_blocks: summed
};

// Throws std::invalid_argument on a bad option, TraceError on a block size that does not fit.
FleetResult replay_fleet(std::span<const TraceRequest> reqs, const FleetOptions& fleet, const ReplayOptions& opt);

// replay_pool_blocks for one instance of a fleet: at least one block.
int32_t instance_pool_blocks(std::span<const TraceRequest> reqs, int64_t capacity_tokens, int32_t block_size);

}  // namespace kvscope
