#pragma once
// The hash-chain trees: one per instance, and the merged one over all instances that a
// KV-aware router works from. A node is a (group_idx, hash); its parent the block before it in
// its prefix. The same hash on two instances is the same prefix cached twice (engines hash a
// block with its parent's hash, so equal hashes mean equal token prefixes; with the same model
// and hash seed, as in one deployment).
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "attach/cache_view.h"

namespace kvscope::attach {

struct TreeShape {
  uint64_t nodes = 0;
  uint64_t roots = 0;    // no parent, or a parent that is not cached (see orphans)
  uint64_t orphans = 0;  // roots whose parent hash is not cached
  uint64_t leaves = 0;
  uint64_t max_depth = 0;  // blocks on the longest chain
};

TreeShape tree_shape(const CacheView& view);

struct MergedNode {
  int32_t group_idx = 0;
  BlockHash hash;
  std::optional<BlockHash> parent;
  uint64_t tokens = 0;
  std::set<size_t> instances;  // indices of the instances that cache it (any medium)
};

struct FleetOverlap {
  uint64_t nodes = 0;              // distinct (group, hash) over the fleet
  uint64_t copies = 0;             // sum over instances of their distinct nodes
  uint64_t shared_nodes = 0;       // nodes cached on 2 or more instances
  uint64_t duplicated_blocks = 0;  // copies - nodes: what one copy per prefix would free
  uint64_t duplicated_tokens = 0;  // their tokens
  double ideal_router_saving = 0;  // duplicated_blocks / copies (0 when empty)
};

struct MergedTree {
  std::vector<MergedNode> nodes;  // sorted by group, hash
  FleetOverlap overlap;
};

MergedTree merge_trees(const std::vector<const CacheView*>& views);

}  // namespace kvscope::attach
