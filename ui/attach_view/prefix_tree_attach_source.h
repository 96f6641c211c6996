#pragma once
// An attached fleet's merged forest (attach/prefix_forest.h) as a prefix tree: one node per
// (group, hash) over all instances, each marked with the instances that cache it. The stream
// carries neither per-request block tables nor hit counts, so no node is live and hits stay 0;
// without a tokenizer in the window a node shows its token ids, "[100 101 …]".
#include <memory>
#include <vector>

#include "attach/prefix_forest.h"
#include "widgets/prefix_tree_layout.h"

namespace kvscope::ui {

std::vector<PrefixTreeNode> merged_tree_nodes(const attach::MergedTree& merged,
                                              const std::vector<const attach::CacheView*>& views);

// Laid out (O(n)), ready for PrefixTreeWidget::setTree: the attach session calls it on its own thread.
std::shared_ptr<const PrefixTreeLayout> merged_tree_layout(const attach::MergedTree& merged,
                                                           const std::vector<const attach::CacheView*>& views);

}  // namespace kvscope::ui
