#include "attach/fleet_sharing.h"

#include <algorithm>

namespace kvscope::attach {

FleetSharing fleet_sharing(const MergedTree& merged, size_t instances) {
  FleetSharing f;
  f.overlap = merged.overlap;
  // A node's instance indices can only exceed the count given when the caller miscounted;
  // grow rather than index out of range.
  for (const MergedNode& n : merged.nodes)
    if (!n.instances.empty()) instances = std::max(instances, *n.instances.rbegin() + 1);
  f.by_holders.resize(instances);
  for (size_t k = 0; k < instances; ++k) f.by_holders[k].holders = k + 1;
  f.per_instance.resize(instances);
  for (const MergedNode& n : merged.nodes) {
    const size_t k = n.instances.size();
    if (k == 0) continue;
    f.by_holders[k - 1].nodes += 1;
    f.by_holders[k - 1].tokens += n.tokens;
    f.token_copies += n.tokens * k;
    for (size_t i : n.instances) {
      InstanceSharing& s = f.per_instance[i];
      ++s.nodes;
      s.tokens += n.tokens;
      if (k >= 2) ++s.shared_nodes, s.shared_tokens += n.tokens;
    }
  }
  f.ideal_router_token_saving =
      f.token_copies ? static_cast<double>(f.overlap.duplicated_tokens) / static_cast<double>(f.token_copies) : 0;
  return f;
}

}  // namespace kvscope::attach
