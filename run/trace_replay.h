#pragma once
// Prefix-cache hit curves from request traces, with no model compute: every request of a trace
// (run/trace_reader.h) goes, in file order, through the engine's own KvCacheManager and
// BlockPool (core/kv): attach_cached_prefix (the prefix-cache lookup), allocate_slots for the
// rest of its prompt, then free (its full blocks stay cached, evictable LRU). One pass per
// capacity. Token ids are synthesized from the hash ids, so equal ids give equal tokens and the
// manager's own hashing decides what hits. docs/replay.md states the semantics.
#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_types.h"
#include "run/trace_reader.h"

namespace kvscope {

struct ReplayOptions {
  int32_t block_size = 512;  // must divide every request's trace block size
  bool validate = false;     // check the manager's invariants after every request (tests)
  // Synthesized token ids are below this: a real model's vocabulary size when the same prompts
  // are to be run through the engine (run/trace_workload.h); 2^31 otherwise.
  int64_t vocab_size = int64_t{1} << 31;
  // Capacities replayed at once (each pass has its own manager; the trace is shared read-only).
  int32_t threads = 1;
};

struct ReplayPoint {
  int64_t capacity_tokens = 0;  // asked for; 0: unbounded
  int32_t pool_blocks = 0;      // the pool it became
  uint64_t prompt_tokens = 0;
  uint64_t hit_tokens = 0;  // prompt tokens served from the prefix cache
  uint64_t evictions = 0;   // cached blocks whose hash was dropped to reuse the block
  uint64_t orphaned = 0;    // cached descendants un-hashed with an evicted ancestor
  int64_t requests = 0;
  int64_t truncated_requests = 0;  // prompts longer than the free pool: the tail that did not fit
  double seconds = 0;              // this pass's wall time
  double hit_ratio() const {
    return prompt_tokens == 0 ? 0.0 : static_cast<double>(hit_tokens) / static_cast<double>(prompt_tokens);
  }
};

// The prompt's token ids: position j of trace block k is token(hash_ids[k], j); positions past
// the hash chain get ids unique to the request (they never hit).
void synthesize_prompt(const TraceRequest& r, std::vector<TokenId>& out, int64_t vocab_size = int64_t{1} << 31);
TokenId synthetic_token(int64_t hash_id, int32_t pos_in_block, int64_t vocab_size = int64_t{1} << 31);

// Throws TraceError naming the first request whose trace block size block_size does not divide.
void check_replay_block_size(std::span<const TraceRequest> reqs, int32_t block_size);

// A pool big enough that nothing is ever evicted: one block per distinct cached block the trace
// can produce plus the largest prompt.
int64_t unbounded_pool_blocks(std::span<const TraceRequest> reqs, int32_t block_size);

// The pool of `capacity_tokens` (0: unbounded_pool_blocks) in blocks of block_size; throws
// std::invalid_argument on a negative capacity or more than 2^31 blocks.
int32_t replay_pool_blocks(std::span<const TraceRequest> reqs, int64_t capacity_tokens, int32_t block_size);

// One request, untimed: admitted (attach_cached_prefix), its prompt allocated as far as the free
// pool holds (*truncated when not all of it), then finished and freed. Returns its hit tokens.
int32_t replay_request(KvCacheManager& kv, SeqId seq, std::span<const TokenId> prompt, bool validate, bool* truncated);

ReplayPoint replay_trace(std::span<const TraceRequest> reqs, int64_t capacity_tokens, const ReplayOptions& opt);
std::vector<ReplayPoint> replay_curve(std::span<const TraceRequest> reqs, std::span<const int64_t> capacities,
                                      const ReplayOptions& opt);

}  // namespace kvscope
