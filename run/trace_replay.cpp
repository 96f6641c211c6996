#include "run/trace_replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "kv/kv_cache_manager.h"

namespace kvscope {

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer: every input bit reaches every output bit
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

TokenId synthetic_token(int64_t hash_id, int32_t pos_in_block, int64_t vocab_size) {
  const uint64_t h = mix64(mix64(static_cast<uint64_t>(hash_id)) ^ static_cast<uint32_t>(pos_in_block));
  return static_cast<TokenId>(h % static_cast<uint64_t>(vocab_size));  // a non-negative TokenId
}

void synthesize_prompt(const TraceRequest& r, std::vector<TokenId>& out, int64_t vocab_size) {
  if (vocab_size <= 0 || vocab_size > (int64_t{1} << 31)) throw std::invalid_argument("vocab size must be in 1..2^31");
  out.resize(static_cast<size_t>(r.input_length));
  const int64_t covered = std::min<int64_t>(r.input_length, static_cast<int64_t>(r.hash_ids.size()) * r.block_size);
  for (int64_t p = 0; p < covered; ++p)
    out[p] = synthetic_token(r.hash_ids[p / r.block_size], static_cast<int32_t>(p % r.block_size), vocab_size);
  // Past the chain the trace says nothing: ids from the line number keep them unique.
  const uint64_t seed = mix64(0x5eed0000ull ^ static_cast<uint64_t>(r.line));
  for (int64_t p = covered; p < r.input_length; ++p)
    out[p] = static_cast<TokenId>(mix64(seed + static_cast<uint64_t>(p)) % static_cast<uint64_t>(vocab_size));
}

void check_replay_block_size(std::span<const TraceRequest> reqs, int32_t block_size) {
  if (block_size <= 0) throw std::invalid_argument("block size must be > 0");
  for (const TraceRequest& r : reqs)
    if (r.block_size % block_size != 0)
      throw TraceError(r.line, "block size " + std::to_string(block_size) + " does not divide the trace's " +
                                   std::to_string(r.block_size) + "-token blocks");
}

int64_t unbounded_pool_blocks(std::span<const TraceRequest> reqs, int32_t block_size) {
  // Distinct chain prefixes (a hash of the ids so far) are the distinct trace blocks; each is
  // r.block_size / block_size cached blocks. Full blocks past a chain are unique to a request.
  std::unordered_set<uint64_t> chains;
  int64_t blocks = 0, largest = 0;
  for (const TraceRequest& r : reqs) {
    uint64_t h = mix64(static_cast<uint64_t>(r.block_size));
    for (int64_t id : r.hash_ids) {
      h = mix64(h ^ mix64(static_cast<uint64_t>(id)));
      if (chains.insert(h).second) blocks += r.block_size / block_size;
    }
    const int64_t covered = static_cast<int64_t>(r.hash_ids.size()) * r.block_size;
    if (r.input_length > covered) blocks += (r.input_length - covered) / block_size;
    largest = std::max(largest, ceil_div(r.input_length, block_size));
  }
  return blocks + largest + 1;
}

int32_t replay_pool_blocks(std::span<const TraceRequest> reqs, int64_t capacity_tokens, int32_t block_size) {
  if (capacity_tokens < 0) throw std::invalid_argument("capacity must be >= 0 tokens");
  const int64_t blocks = capacity_tokens == 0 ? unbounded_pool_blocks(reqs, block_size) : capacity_tokens / block_size;
  if (blocks > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("capacity " + std::to_string(capacity_tokens) + " tokens is more than 2^31 blocks of " +
                                std::to_string(block_size));
  return static_cast<int32_t>(blocks);
}

int32_t replay_request(KvCacheManager& kv, SeqId seq, std::span<const TokenId> prompt, bool validate, bool* truncated) {
  const int32_t len = static_cast<int32_t>(prompt.size());
  // The engine's admission: the manager decides the hit (never the block of the last token).
  const int32_t hit = kv.attach_cached_prefix(seq, prompt);
  // Everything else of this sequence is freed, so the free pool is the most it can get; a
  // longer prompt keeps its head and counts the tail as a miss (the engine would refuse it).
  const int64_t room = static_cast<int64_t>(kv.pool().num_free()) * kv.config().block_size;
  const int32_t fit = static_cast<int32_t>(std::min<int64_t>(len - hit, room));
  *truncated = fit < len - hit;
  if (!kv.allocate_slots(seq, prompt.first(static_cast<size_t>(hit + fit)), fit))
    throw std::logic_error("replay: allocate_slots refused what the free pool holds");
  kv.free(seq);  // finished: full blocks stay cached, evictable, tail first as in vLLM
  if (validate) kv.validate();
  return hit;
}

ReplayPoint replay_trace(std::span<const TraceRequest> reqs, int64_t capacity_tokens, const ReplayOptions& opt) {
  const int32_t bs = opt.block_size;
  check_replay_block_size(reqs, bs);
  ReplayPoint pt;
  pt.capacity_tokens = capacity_tokens;
  pt.pool_blocks = replay_pool_blocks(reqs, capacity_tokens, bs);
  KvCacheConfig cfg;
  cfg.block_size = bs;
  cfg.num_blocks = pt.pool_blocks;
  cfg.prefix_caching = true;
  KvCacheManager kv(cfg);
  std::vector<TokenId> prompt;
  SeqId seq = 0;
  for (const TraceRequest& r : reqs) {
    synthesize_prompt(r, prompt, opt.vocab_size);
    bool truncated = false;
    const int32_t hit = replay_request(kv, seq++, prompt, opt.validate, &truncated);
    pt.truncated_requests += truncated ? 1 : 0;
    ++pt.requests;
    pt.prompt_tokens += static_cast<uint64_t>(r.input_length);
    pt.hit_tokens += static_cast<uint64_t>(hit);
  }
  pt.evictions = kv.pool().counters().evictions;
  pt.orphaned = kv.pool().counters().orphaned;
  return pt;
}

std::vector<ReplayPoint> replay_curve(std::span<const TraceRequest> reqs, std::span<const int64_t> capacities,
                                      const ReplayOptions& opt) {
  std::vector<ReplayPoint> out(capacities.size());
  if (capacities.empty()) return out;
  std::vector<std::exception_ptr> errors(capacities.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < capacities.size(); i = next++) {
      try {
        const auto t0 = std::chrono::steady_clock::now();
        out[i] = replay_trace(reqs, capacities[i], opt);
        out[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } catch (...) { errors[i] = std::current_exception(); }
    }
  };
  const size_t n = std::clamp<size_t>(static_cast<size_t>(std::max(1, opt.threads)), 1, capacities.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);  // the first capacity's error, as a serial run would give
  return out;
}

}  // namespace kvscope
