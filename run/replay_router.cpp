#include "run/replay_router.h"

#include <limits>

namespace kvscope {

std::optional<RouterKind> parse_router(const std::string& name) {
  if (name == "round-robin") return RouterKind::RoundRobin;
  if (name == "least-loaded") return RouterKind::LeastLoaded;
  if (name == "prefix-aware") return RouterKind::PrefixAware;
  return std::nullopt;
}

const char* router_name(RouterKind k) {
  switch (k) {
    case RouterKind::RoundRobin:
      return "round-robin";
    case RouterKind::LeastLoaded:
      return "least-loaded";
    case RouterKind::PrefixAware:
      return "prefix-aware";
  }
  return "?";
}

size_t route(RouterKind k, std::span<const RouterCandidate> instances, uint64_t index, int32_t prompt_tokens) {
  if (instances.empty()) return 0;
  if (k == RouterKind::RoundRobin) return static_cast<size_t>(index % instances.size());
  size_t best = 0;
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < instances.size(); ++i) {
    const RouterCandidate& c = instances[i];
    const int64_t cost =
        k == RouterKind::LeastLoaded ? c.load_tokens : c.load_tokens + (prompt_tokens - c.cached_tokens);
    if (cost < best_cost) {
      best_cost = cost;
      best = i;
    }
  }
  return best;
}

}  // namespace kvscope
