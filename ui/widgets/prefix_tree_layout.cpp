#include "widgets/prefix_tree_layout.h"

#include <algorithm>

namespace kvscope::ui {

void PrefixTreeLayout::build(std::vector<PrefixTreeNode> nodes) {
  nodes_ = std::move(nodes);
  const size_t n = nodes_.size();
  depth_.assign(n, 0);
  row_.assign(n, 0.0);
  columns_.clear();
  rows_ = shared_ = live_ = evictableLeaves_ = checkpoints_ = 0;
  for (PrefixTreeNode& x : nodes_)
    if (x.parent < -1 || x.parent >= static_cast<int>(n)) x.parent = -1;
  linkChildren();
  placeDepthFirst();
  for (size_t i = 0; i < n; ++i) {
    const PrefixTreeNode& x = nodes_[i];
    shared_ += x.refCount >= 2;
    live_ += x.live;
    checkpoints_ += x.checkpoint;
    evictableLeaves_ += x.evictable && isLeaf(static_cast<int>(i));
  }
}

// Counting sort of the nodes by parent: every node's children in one contiguous run, in the
// source's order (so siblings keep the order the source gave them: first seen first).
void PrefixTreeLayout::linkChildren() {
  const size_t n = nodes_.size();
  childBegin_.assign(n + 1, 0);
  for (const PrefixTreeNode& x : nodes_)
    if (x.parent >= 0) ++childBegin_[static_cast<size_t>(x.parent) + 1];
  for (size_t i = 0; i < n; ++i) childBegin_[i + 1] += childBegin_[i];
  childEnd_.assign(childBegin_.begin(), childBegin_.end() - (n ? 1 : 0));
  if (n == 0) childEnd_.clear();
  children_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const int p = nodes_[i].parent;
    if (p >= 0) children_[static_cast<size_t>(childEnd_[static_cast<size_t>(p)]++)] = static_cast<int>(i);
  }
}

// Iterative depth-first walk: a leaf takes the next row, a parent the middle of its first and
// last child's rows (post-order). Nodes a cycle kept from every root become roots themselves.
void PrefixTreeLayout::placeDepthFirst() {
  const size_t n = nodes_.size();
  std::vector<uint8_t> seen(n, 0);
  std::vector<std::pair<int, int>> stack;  // node, next child position
  auto walkFrom = [&](int root) {
    seen[static_cast<size_t>(root)] = 1;
    depth_[static_cast<size_t>(root)] = 0;
    stack.push_back({root, childBegin_[static_cast<size_t>(root)]});
    while (!stack.empty()) {
      auto& [v, next] = stack.back();
      const size_t vi = static_cast<size_t>(v);
      if (next < childEnd_[vi]) {
        const int c = children_[static_cast<size_t>(next++)];
        if (seen[static_cast<size_t>(c)]) continue;
        seen[static_cast<size_t>(c)] = 1;
        depth_[static_cast<size_t>(c)] = depth_[vi] + 1;
        stack.push_back({c, childBegin_[static_cast<size_t>(c)]});
        continue;
      }
      int first = -1, last = -1;
      for (int k = childBegin_[vi]; k < childEnd_[vi]; ++k) {
        const int c = children_[static_cast<size_t>(k)];
        if (depth_[static_cast<size_t>(c)] != depth_[vi] + 1) continue;  // reached through another path
        if (first < 0) first = c;
        last = c;
      }
      row_[vi] = first < 0 ? rows_++ : (row_[static_cast<size_t>(first)] + row_[static_cast<size_t>(last)]) / 2;
      const size_t d = static_cast<size_t>(depth_[vi]);
      if (columns_.size() <= d) columns_.resize(d + 1);
      columns_[d].push_back(v);
      stack.pop_back();
    }
  };
  for (size_t i = 0; i < n; ++i)
    if (nodes_[i].parent < 0) walkFrom(static_cast<int>(i));
  for (size_t i = 0; i < n; ++i)
    if (!seen[i]) {
      nodes_[i].parent = -1;
      walkFrom(static_cast<int>(i));
    }
  // Post-order emits a column's nodes in row order already (subtrees own disjoint row ranges).
}

QString PrefixTreeLayout::tokensOf(int i) const {
  const QString& own = nodes_[static_cast<size_t>(i)].tokens;
  return own.isEmpty() && lazy_.tokens ? lazy_.tokens(i) : own;
}

QString PrefixTreeLayout::hashOf(int i) const {
  const QString& own = nodes_[static_cast<size_t>(i)].hash;
  return own.isEmpty() && lazy_.hash ? lazy_.hash(i) : own;
}

std::pair<int, int> PrefixTreeLayout::rangeInColumn(int depth, double rowLo, double rowHi) const {
  if (depth < 0 || depth >= columns()) return {0, 0};
  const std::vector<int>& col = columns_[static_cast<size_t>(depth)];
  auto rowAt = [&](int v) { return row_[static_cast<size_t>(v)]; };
  const auto lo = std::lower_bound(col.begin(), col.end(), rowLo, [&](int v, double r) { return rowAt(v) < r; });
  const auto hi = std::upper_bound(lo, col.end(), rowHi, [&](double r, int v) { return r < rowAt(v); });
  return {static_cast<int>(lo - col.begin()), static_cast<int>(hi - col.begin())};
}

int PrefixTreeLayout::nearestInColumn(int depth, double row) const {
  if (depth < 0 || depth >= columns() || columns_[static_cast<size_t>(depth)].empty()) return -1;
  const std::vector<int>& col = columns_[static_cast<size_t>(depth)];
  const int k = rangeInColumn(depth, row, 1e300).first;
  int best = -1;
  for (int j : {k - 1, k})
    if (j >= 0 && j < static_cast<int>(col.size()) &&
        (best < 0 || std::abs(row_[static_cast<size_t>(col[static_cast<size_t>(j)])] - row) <
                         std::abs(row_[static_cast<size_t>(best)] - row)))
      best = col[static_cast<size_t>(j)];
  return best;
}

}  // namespace kvscope::ui
