#pragma once
// The prefix tree as plain data, and its layout: no widget, no engine. A source (the engine's
// snapshot, an attached fleet's merged forest) turns what it knows into a PrefixTreeNode list;
// PrefixTreeLayout places it as a layered tidy tree (depth = column, leaves stacked in rows, a
// parent centred on its children) in O(n), and answers "which nodes fall in these rows of this
// column" by binary search, so the widget only ever touches what is on screen.
#include <QString>
#include <cstdint>
#include <functional>
#include <vector>

namespace kvscope::ui {

struct PrefixTreeNode {
  uint64_t id = 0;          // the source's key (block id, hash bits): stable across snapshots
  int parent = -1;          // index into the same list; -1: a root (first block, or parent unknown)
  QString tokens;           // the block's tokens as text ("" when the source has no tokenizer)
  QString hash;             // the block hash as text ("" for a block not yet full)
  int refCount = 0;         // sequences holding it now (attach: instances holding it)
  int hits = 0;             // prefix-cache hits on it that the source saw
  bool live = false;        // on the path of a live request
  bool evictable = false;   // ref 0 but still cached: the LRU may recycle it
  bool partial = false;     // not full yet: not in the prefix cache
  bool checkpoint = false;  // hybrid recurrent models: a saved state at this block's end (a hit can stop here)
  uint32_t instances = 0;   // attach: bit i set when instance i caches it
};

class PrefixTreeLayout {
 public:
  // Places the nodes. Parents that are out of range (or a cycle, which a broken source could
  // send) make a node a root instead of looping.
  void build(std::vector<PrefixTreeNode> nodes);

  const std::vector<PrefixTreeNode>& nodes() const { return nodes_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  int depthOf(int i) const { return depth_[static_cast<size_t>(i)]; }
  double rowOf(int i) const { return row_[static_cast<size_t>(i)]; }  // leaves at 0, 1, 2...; parents between
  int childCount(int i) const { return childEnd_[static_cast<size_t>(i)] - childBegin_[static_cast<size_t>(i)]; }
  bool isLeaf(int i) const { return childCount(i) == 0; }
  int columns() const { return static_cast<int>(columns_.size()); }  // deepest chain, in blocks
  int rows() const { return rows_; }                                 // leaves
  // Nodes of one column (depth), in row order.
  const std::vector<int>& column(int depth) const { return columns_[static_cast<size_t>(depth)]; }
  // [first, last) positions in column(depth) whose rows lie within [rowLo, rowHi].
  std::pair<int, int> rangeInColumn(int depth, double rowLo, double rowHi) const;
  // The node of column depth whose row is nearest to row, or -1 for an empty column.
  int nearestInColumn(int depth, double row) const;

  // Text a source computes only when it is shown (an attached fleet's 100K token-id lists and
  // hashes would cost a second per picture): used where the node's own string is empty.
  struct LazyText {
    std::function<QString(int)> tokens, hash;
  };
  void setLazyText(LazyText t) { lazy_ = std::move(t); }
  QString tokensOf(int i) const;
  QString hashOf(int i) const;

  // Counts for the panel's caption and the tests.
  int sharedCount() const { return shared_; }  // refCount >= 2
  int liveCount() const { return live_; }
  int evictableLeafCount() const { return evictableLeaves_; }
  int checkpointCount() const { return checkpoints_; }

 private:
  std::vector<PrefixTreeNode> nodes_;
  std::vector<int> depth_;
  std::vector<double> row_;
  std::vector<int> childBegin_, childEnd_, children_;  // CSR child lists
  std::vector<std::vector<int>> columns_;
  int rows_ = 0, shared_ = 0, live_ = 0, evictableLeaves_ = 0, checkpoints_ = 0;
  LazyText lazy_;
  void linkChildren();
  void placeDepthFirst();
};

}  // namespace kvscope::ui
