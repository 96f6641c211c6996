#pragma once
// The overlap a KV-aware router exploits, from the merged tree (prefix_forest.h): how many
// prefixes are cached on exactly k instances, how much of each instance's cache another
// instance also holds, and what an ideal router, sending every prefix to one instance, would not
// have cached twice (in blocks and in tokens). Numbers only: the window plots them, the CLI
// writes them, and the merged tree itself is drawn elsewhere.
#include <cstdint>
#include <vector>

#include "attach/prefix_forest.h"

namespace kvscope::attach {

struct HolderCount {
  uint64_t holders = 0;  // k: the number of instances holding these prefixes
  uint64_t nodes = 0;    // prefixes (merged nodes) held by exactly k instances
  uint64_t tokens = 0;   // their tokens, once each
};

struct InstanceSharing {
  uint64_t nodes = 0, tokens = 0;                // what this instance holds (distinct nodes)
  uint64_t shared_nodes = 0, shared_tokens = 0;  // of it, what at least one other instance holds too
};

struct FleetSharing {
  FleetOverlap overlap;                 // the merged tree's totals (copies, shared_nodes, ...)
  std::vector<HolderCount> by_holders;  // k = 1 .. instances, zeros included
  std::vector<InstanceSharing> per_instance;
  uint64_t token_copies = 0;             // sum over instances of the tokens each holds
  double ideal_router_token_saving = 0;  // overlap.duplicated_tokens / token_copies (0 when empty)
};

// instances: how many views went into the merge (instances that hold nothing still count).
FleetSharing fleet_sharing(const MergedTree& merged, size_t instances);

}  // namespace kvscope::attach
