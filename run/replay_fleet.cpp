#include "run/replay_fleet.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "run/replay_tier.h"

namespace kvscope {

void InstanceStats::add(const InstanceStats& o) {
  pool_blocks += o.pool_blocks;
  requests += o.requests;
  prompt_tokens += o.prompt_tokens;
  gpu_hit_tokens += o.gpu_hit_tokens;
  cpu_hit_tokens += o.cpu_hit_tokens;
  evictions += o.evictions;
  cpu_evictions += o.cpu_evictions;
  truncated_requests += o.truncated_requests;
}

int32_t instance_pool_blocks(std::span<const TraceRequest> reqs, int64_t capacity_tokens, int32_t block_size) {
  const int32_t blocks = replay_pool_blocks(reqs, capacity_tokens, block_size);
  if (blocks < 1)
    throw std::invalid_argument("capacity " + std::to_string(capacity_tokens) + " tokens is less than one block");
  return blocks;
}

FleetResult replay_fleet(std::span<const TraceRequest> reqs, const FleetOptions& fleet, const ReplayOptions& opt) {
  if (fleet.instances < 1 || fleet.instances > 4096) throw std::invalid_argument("instances must be in 1..4096");
  if (fleet.cpu_tokens < 0) throw std::invalid_argument("CPU tier must be >= 0 tokens");
  const int32_t bs = opt.block_size;
  check_replay_block_size(reqs, bs);
  KvCacheConfig cfg;
  cfg.block_size = bs;
  cfg.num_blocks = instance_pool_blocks(reqs, fleet.gpu_tokens, bs);
  cfg.prefix_caching = true;
  std::vector<std::unique_ptr<TieredKvCacheManager>> kv;
  for (int32_t i = 0; i < fleet.instances; ++i)
    kv.push_back(std::make_unique<TieredKvCacheManager>(cfg, fleet.cpu_tokens / bs));
  FleetResult res;
  res.instances.resize(static_cast<size_t>(fleet.instances));
  std::vector<RouterCandidate> cand(static_cast<size_t>(fleet.instances));
  std::vector<TokenId> prompt;
  SeqId seq = 0;
  for (size_t n = 0; n < reqs.size(); ++n) {
    const TraceRequest& r = reqs[n];
    synthesize_prompt(r, prompt, opt.vocab_size);
    if (fleet.router == RouterKind::PrefixAware)
      for (size_t i = 0; i < cand.size(); ++i) cand[i].cached_tokens = kv[i]->peek_cached_prefix(prompt);
    const size_t at = route(fleet.router, cand, n, r.input_length);
    TieredKvCacheManager& m = *kv[at];
    InstanceStats& st = res.instances[at];
    m.load_from_cpu(seq, prompt);
    bool truncated = false;
    const int32_t hit = replay_request(m, seq++, prompt, opt.validate, &truncated);
    st.truncated_requests += truncated ? 1 : 0;
    ++st.requests;
    st.prompt_tokens += static_cast<uint64_t>(r.input_length);
    cand[at].load_tokens += r.input_length - hit;
  }
  for (size_t i = 0; i < kv.size(); ++i) {
    InstanceStats& st = res.instances[i];
    st.pool_blocks = cfg.num_blocks;
    st.gpu_hit_tokens = kv[i]->gpu_hit_tokens();
    st.cpu_hit_tokens = kv[i]->cpu_hit_tokens();
    st.evictions = kv[i]->pool().counters().evictions;
    st.cpu_evictions = kv[i]->cpu_tier() ? kv[i]->cpu_tier()->evictions() : 0;
    res.total.add(st);
  }
  return res;
}

}  // namespace kvscope
