#pragma once
// Where a fleet replay sends each request (--router). KV-aware routers such as NVIDIA Dynamo's
// and llm-d's weigh the prefix an instance already caches against how busy it is; the
// prefix-aware router here scores each instance by the prompt tokens it would have to compute
// plus the tokens already queued on it, and takes the cheapest.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace kvscope {

enum class RouterKind { RoundRobin, LeastLoaded, PrefixAware };

std::optional<RouterKind> parse_router(const std::string& name);  // round-robin, least-loaded, prefix-aware
const char* router_name(RouterKind k);

struct RouterCandidate {
  int64_t load_tokens = 0;    // work queued on the instance, in tokens
  int32_t cached_tokens = 0;  // of this prompt, in its prefix cache now
};

// The instance for request number `index` (0-based) with `prompt_tokens` tokens. Ties go to the
// lowest instance number.
size_t route(RouterKind k, std::span<const RouterCandidate> instances, uint64_t index, int32_t prompt_tokens);

}  // namespace kvscope
