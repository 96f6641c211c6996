#include "attach/prefix_forest.h"

#include <unordered_map>
#include <unordered_set>

namespace kvscope::attach {
namespace {

using GroupHash = std::pair<int32_t, BlockHash>;

struct GroupHashHash {
  size_t operator()(const GroupHash& g) const noexcept {
    return std::hash<BlockHash>()(g.second) ^ static_cast<size_t>(g.first);
  }
};

}  // namespace

TreeShape tree_shape(const CacheView& view) {
  // One node per (group, hash) across media; depth by walking parents with memoisation.
  std::unordered_map<GroupHash, std::optional<BlockHash>, GroupHashHash> parent;
  for (const auto& [k, b] : view.blocks()) parent.emplace(GroupHash{k.group_idx, k.hash}, b.parent);
  TreeShape t;
  t.nodes = parent.size();
  std::unordered_set<GroupHash, GroupHashHash> has_child;
  for (const auto& [n, p] : parent) {
    if (!p) {
      ++t.roots;
    } else if (!parent.count({n.first, *p})) {
      ++t.roots, ++t.orphans;
    } else {
      has_child.insert({n.first, *p});
    }
  }
  t.leaves = t.nodes - has_child.size();
  std::unordered_map<GroupHash, uint64_t, GroupHashHash> depth;
  for (const auto& [n, p] : parent) {
    // Walk up to a known depth (iterative: a 100,000-block chain must not recurse).
    std::vector<GroupHash> path;
    GroupHash cur = n;
    uint64_t base = 0;
    while (true) {
      if (auto d = depth.find(cur); d != depth.end()) {
        base = d->second;
        break;
      }
      path.push_back(cur);
      const auto& pp = parent.at(cur);
      if (!pp || !parent.count({cur.first, *pp}) || path.size() > parent.size()) break;  // a cycle cannot loop forever
      cur = {cur.first, *pp};
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) depth[*it] = ++base;
    t.max_depth = std::max(t.max_depth, depth[n]);
  }
  return t;
}

MergedTree merge_trees(const std::vector<const CacheView*>& views) {
  std::map<GroupHash, MergedNode> nodes;
  for (size_t i = 0; i < views.size(); ++i) {
    for (const auto& [k, b] : views[i]->blocks()) {
      MergedNode& n = nodes[{k.group_idx, k.hash}];
      n.group_idx = k.group_idx;
      n.hash = k.hash;
      if (!n.parent) n.parent = b.parent;
      n.tokens = std::max<uint64_t>(n.tokens, b.token_ids.size());
      n.instances.insert(i);
    }
  }
  MergedTree m;
  for (auto& [key, n] : nodes) {
    m.overlap.copies += n.instances.size();
    if (n.instances.size() >= 2) {
      ++m.overlap.shared_nodes;
      m.overlap.duplicated_blocks += n.instances.size() - 1;
      m.overlap.duplicated_tokens += n.tokens * (n.instances.size() - 1);
    }
    m.nodes.push_back(std::move(n));
  }
  m.overlap.nodes = m.nodes.size();
  m.overlap.ideal_router_saving =
      m.overlap.copies ? static_cast<double>(m.overlap.duplicated_blocks) / static_cast<double>(m.overlap.copies) : 0;
  return m;
}

}  // namespace kvscope::attach
