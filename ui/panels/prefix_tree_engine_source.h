#pragma once
// kvscope's own engine as a prefix tree: the nodes are the blocks of the snapshot that are in
// the prefix cache (hashed) or on a live request's block table, each one's parent the block
// before it in its chain. A snapshot carries every block's hash and ref count but not the
// parent or tokens of a cached block nobody holds any more, so this remembers them from the
// block tables while the block was held (every snapshot, cheaply: only new hashes cost work),
// and counts prefix-cache hits per block from the block events.
#include <vector>

#include "widgets/prefix_tree_layout.h"
#include "engine_bridge/ui_types.h"

namespace kvscope::ui {

class EnginePrefixTree {
 public:
  void reset(VocabPtr vocab);  // a new engine: forget every block
  // Call with every delivered snapshot and its events (even when the tree is hidden).
  void observe(const Snapshot& s, const std::vector<BlockEvent>& events);
  std::vector<PrefixTreeNode> nodes(const Snapshot& s) const;

 private:
  struct Known {
    bool valid = false;
    BlockHash hash = 0;
    BlockId parent = kNoBlock;
    QString tokens, hashText;
    int hits = 0;
  };
  void remember(const Snapshot& s, const SeqSnap& q, size_t logical);
  QString textOf(const SeqSnap& q, size_t logical, int filled, int blockSize) const;
  VocabPtr vocab_;
  std::vector<Known> known_;  // [block id] of KV group 0
};

}  // namespace kvscope::ui
