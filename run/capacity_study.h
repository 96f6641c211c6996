#pragma once
// The Capacity panel's computation, without Qt: one trace's prefix-cache hit ratio against
// cache size (a curve of untimed replays, run/trace_replay.h), the routers and a CPU tier side
// by side at one pool size per instance (run/replay_fleet.h), and what one more GiB of KV buys
// there for a model geometry (its KV bytes per token turn GiB into tokens). Runs pass by pass
// with progress and a cancel flag, so a worker thread can run it behind a window.
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "run/replay_fleet.h"

namespace kvscope {

struct CapacityStudyInput {
  int32_t block_size = 512;
  int64_t kv_bytes_per_token = 0;     // the geometry that turns tokens into bytes (> 0)
  int64_t pool_tokens = 1 << 20;      // per instance, for the routers, tiers and the marginal GiB
  int32_t instances = 4;              // for the router comparison
  int64_t cpu_tokens = 0;             // per instance; 0: no tier comparison
  std::vector<int64_t> curve_tokens;  // empty: 64K x 2^k up to past the trace's working set
};

struct CapacityRow {
  std::string name;  // "round-robin", "pooled", "GPU + CPU tier"...
  InstanceStats stats;
};

struct CapacityStudy {
  std::vector<ReplayPoint> curve;  // by capacity; the last one unbounded
  int64_t unbounded_tokens = 0;    // the unbounded pool's size (what the trace can ever cache)
  std::vector<CapacityRow> rows;   // routers, pooled, tiers
  double hit_at_pool = 0;          // one instance of pool_tokens
  double hit_plus_gib = 0;         // one instance of pool_tokens + tokens_per_gib
  int64_t tokens_per_gib = 0;
  double marginal_per_gib() const { return hit_plus_gib - hit_at_pool; }
};

// Capacities of the default curve: 64K tokens doubling up to the unbounded pool's size.
std::vector<int64_t> default_curve_tokens(int64_t unbounded_tokens);

// progress(done, total) after each pass; returns false (and a partial study) when `cancel` is
// set between passes. Throws std::invalid_argument / TraceError on bad input.
bool run_capacity_study(std::span<const TraceRequest> reqs, const CapacityStudyInput& in, CapacityStudy& out,
                        const std::function<void(int, int)>& progress = {}, const std::atomic<bool>* cancel = nullptr);

}  // namespace kvscope
