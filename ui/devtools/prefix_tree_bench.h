#pragma once
// The drawn prefix tree at 16K blocks, measured on the UI thread: a synthetic forest shaped like
// a chat workload (system prompts of 8 blocks, 10 chats of 24 blocks under each, one chat live,
// four evictable), laid out and painted far (the whole tree fits: merged strips) and near (zoom
// 1 around a block in the middle: nodes with their tokens). Used by `kvscope --frame-bench`
// and by the GUI test that holds the tree to a 16 ms frame.
#include <QJsonObject>
#include <vector>

#include "widgets/prefix_tree_layout.h"

namespace kvscope::ui {

std::vector<PrefixTreeNode> synthetic_prefix_forest(int blocks);

// Best of `reps` (a shared machine), wall clock and the UI thread's CPU time: {"blocks",
// "layout_and_far_frame_ms", "layout_and_far_frame_cpu_ms", "far_strips", "far_draws_strips",
// "near_frame_ms", "near_frame_cpu_ms", "near_nodes", "width", "height"}.
QJsonObject measure_prefix_tree(int blocks = 16384, int reps = 5, int width = 1000, int height = 420);

}  // namespace kvscope::ui
