#pragma once
// One engine instance's prefix cache as its KV-event stream describes it: the set of cached
// blocks per (group_idx, medium), each with its hash, parent, tokens and when it was seen.
// Only what the stream carries: no physical block ids, no per-request block tables, no
// blocks that are in use but not yet full (engines announce a block once it is hashed).
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv_events/kv_events_codec.h"

namespace kvscope::attach {

using kv_events::BlockHash;

struct BlockKey {
  int32_t group_idx = 0;              // absent in the event: group 0
  std::optional<std::string> medium;  // as sent ("GPU", "CPU", "CPU_PINNED", ...; none: unspecified)
  BlockHash hash;
  bool operator==(const BlockKey&) const = default;
};

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const noexcept;
};

struct CachedBlock {
  BlockKey key;
  std::optional<BlockHash> parent;  // none: the first block of a prefix
  std::vector<int64_t> token_ids;
  double first_seen = 0;  // batch timestamp of its first store (publisher's clock)
  double last_seen = 0;   // of its latest store
  uint32_t copies = 1;    // stores minus removes: an engine may cache one hash twice
};

struct CacheCounters {
  uint64_t stored = 0;                // blocks announced by BlockStored
  uint64_t removed = 0;               // blocks announced by BlockRemoved
  uint64_t clears = 0;                // AllBlocksCleared events
  uint64_t removed_unknown = 0;       // a removed block that was never stored (or already gone)
  uint64_t missing_parent = 0;        // a stored block whose parent is not cached in its group
  uint64_t token_count_mismatch = 0;  // token_ids not block_size per hash
};

class CacheView {
 public:
  void apply(const kv_events::KvEventBatch& batch);
  void clear();  // the engine restarted: forget everything (not counted as a clear event)
  const std::unordered_map<BlockKey, CachedBlock, BlockKeyHash>& blocks() const { return blocks_; }
  const CacheCounters& counters() const { return counters_; }
  // Cached blocks counting every copy (the sum of `copies`): what the engine holds, kept
  // as it changes so that sampling it over time costs nothing.
  uint64_t held_blocks() const { return held_; }
  // Blocks in a stable order: group, medium, first seen, hash.
  std::vector<const CachedBlock*> sorted() const;

 private:
  void store(const kv_events::KvBlockStored& s, double ts);
  void remove(const kv_events::KvBlockRemoved& r);
  bool parent_cached(int32_t group, const BlockHash& parent) const;
  std::unordered_map<BlockKey, CachedBlock, BlockKeyHash> blocks_;
  CacheCounters counters_;
  uint64_t held_ = 0;
};

}  // namespace kvscope::attach
