#pragma once
// Why a prefix lookup stopped where it did: the first block after the hit, explained from the
// prefix ledger (which hashes were cached and evicted, when and by whom: the recorder's view of
// the block events) and from the prompts of earlier requests in the story log.
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/request_story.h"

namespace kvscope {

// What became of each block hash a KV group cached: registered (full, in the prefix cache) and
// dropped (evicted to reuse its block, or un-hashed because its parent was). Bounded: the oldest
// half is forgotten when it grows past max_entries (a miss then reads "never cached").
class PrefixLedger {
 public:
  struct Entry {
    uint64_t registered_step = 0;
    SeqId registered_by = -1;
    bool evicted = false;
    uint64_t evicted_step = 0;
    SeqId evicted_by = -1;  // the request whose allocation evicted it
    bool orphaned = false;  // it went because a block before it in the chain was evicted
  };
  explicit PrefixLedger(size_t max_entries = 1 << 18) : max_entries_(max_entries) {}
  void registered(int32_t group, BlockHash h, uint64_t step, SeqId by);
  void evicted(int32_t group, BlockHash h, uint64_t step, SeqId by, bool orphaned);
  const Entry* find(int32_t group, BlockHash h) const;

 private:
  static uint64_t key(int32_t group, BlockHash h) { return h ^ (static_cast<uint64_t>(group) * 0x9e3779b97f4a7c15ull); }
  size_t max_entries_;
  std::unordered_map<uint64_t, Entry> entries_;
};

// One KV group's side of a lookup.
struct LookupGroup {
  uint64_t salt = 0;
  int32_t window = 0;      // the group's sliding window (0: full attention)
  int32_t hit_tokens = 0;  // what this group alone would have hit
};

// An earlier (or concurrent) request to compare the prompt with.
struct PromptCandidate {
  const RequestStory* story = nullptr;
  std::span<const TokenId> tokens;
  int32_t kv_tokens = 0;  // of those, how many had K/V when the lookup ran
};

struct MissQuery {
  std::span<const TokenId> prompt;
  int32_t hit_tokens = 0;
  int32_t block_size = 16;
  bool prefix_caching = true;
  uint64_t engine = 0;
  std::vector<LookupGroup> groups;  // one per KV group
};

PrefixLookup explain_prefix_lookup(const MissQuery& q, const PrefixLedger& ledger,
                                   const std::vector<PromptCandidate>& others);

}  // namespace kvscope
