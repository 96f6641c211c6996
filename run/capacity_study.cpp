#include "run/capacity_study.h"

#include <stdexcept>

namespace kvscope {

std::vector<int64_t> default_curve_tokens(int64_t unbounded_tokens) {
  std::vector<int64_t> caps;
  for (int64_t c = int64_t{1} << 16; c < unbounded_tokens && caps.size() < 24; c *= 2) caps.push_back(c);
  return caps;
}

bool run_capacity_study(std::span<const TraceRequest> reqs, const CapacityStudyInput& in, CapacityStudy& out,
                        const std::function<void(int, int)>& progress, const std::atomic<bool>* cancel) {
  if (in.kv_bytes_per_token <= 0) throw std::invalid_argument("the geometry has no KV bytes per token");
  if (in.pool_tokens < in.block_size) throw std::invalid_argument("the pool per instance is less than one block");
  if (in.instances < 1 || in.instances > 256) throw std::invalid_argument("instances must be in 1..256");
  check_replay_block_size(reqs, in.block_size);
  ReplayOptions opt;
  opt.block_size = in.block_size;
  out = CapacityStudy{};
  out.unbounded_tokens = unbounded_pool_blocks(reqs, in.block_size) * in.block_size;
  out.tokens_per_gib = (int64_t{1} << 30) / in.kv_bytes_per_token;
  std::vector<int64_t> caps = in.curve_tokens.empty() ? default_curve_tokens(out.unbounded_tokens) : in.curve_tokens;
  caps.push_back(0);  // unbounded last

  struct Fleet {
    std::string name;
    FleetOptions f;
  };
  std::vector<Fleet> fleets;
  for (RouterKind k : {RouterKind::RoundRobin, RouterKind::LeastLoaded, RouterKind::PrefixAware})
    fleets.push_back({std::to_string(in.instances) + " x " + router_name(k), {in.instances, k, in.pool_tokens, 0}});
  fleets.push_back({"pooled: 1 x " + std::to_string(in.instances) + " pools",
                    {1, RouterKind::RoundRobin, in.pool_tokens * in.instances, 0}});
  if (in.cpu_tokens > 0) {
    fleets.push_back({"1 x pool + CPU tier", {1, RouterKind::RoundRobin, in.pool_tokens, in.cpu_tokens}});
    fleets.push_back({"1 x (pool + CPU) on GPU", {1, RouterKind::RoundRobin, in.pool_tokens + in.cpu_tokens, 0}});
  }
  const int total = static_cast<int>(caps.size() + fleets.size()) + 2;
  int done = 0;
  auto step = [&] {
    if (progress) progress(++done, total);
    return !(cancel && cancel->load());
  };
  for (int64_t c : caps) {
    out.curve.push_back(replay_trace(reqs, c, opt));
    if (!step()) return false;
  }
  for (const Fleet& f : fleets) {
    out.rows.push_back({f.name, replay_fleet(reqs, f.f, opt).total});
    if (!step()) return false;
  }
  out.hit_at_pool = replay_trace(reqs, in.pool_tokens, opt).hit_ratio();
  if (!step()) return false;
  out.hit_plus_gib = replay_trace(reqs, in.pool_tokens + out.tokens_per_gib, opt).hit_ratio();
  step();
  return true;
}

}  // namespace kvscope
