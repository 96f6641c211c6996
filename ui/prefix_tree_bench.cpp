#include "prefix_tree_bench.h"

#include <QElapsedTimer>
#include <QPixmap>
#include <algorithm>

#include "prefix_tree_widget.h"

namespace kvscope::ui {

namespace {

PrefixTreeNode block(int parent, int refs) {
  PrefixTreeNode n;
  n.parent = parent;
  n.refCount = refs;
  return n;
}

}  // namespace

std::vector<PrefixTreeNode> synthetic_prefix_forest(int blocks) {
  std::vector<PrefixTreeNode> v;
  auto last = [&] { return static_cast<int>(v.size()) - 1; };
  while (static_cast<int>(v.size()) < blocks) {
    v.push_back(block(-1, 10));  // a system prompt: 8 blocks every chat under it shares
    for (int k = 1; k < 8 && static_cast<int>(v.size()) < blocks; ++k) v.push_back(block(last(), 10));
    const int system = last();
    for (int chat = 0; chat < 10 && static_cast<int>(v.size()) < blocks; ++chat) {
      int parent = system;
      for (int k = 0; k < 24 && static_cast<int>(v.size()) < blocks; ++k) {
        PrefixTreeNode c = block(parent, 1);
        c.live = chat == 0;
        c.evictable = chat > 5;
        c.hits = k % 5;
        c.tokens = QStringLiteral("block %1 of chat %2").arg(k).arg(chat);
        v.push_back(std::move(c));
        parent = last();
      }
    }
  }
  return v;
}

QJsonObject measure_prefix_tree(int blocks, int reps, int width, int height) {
  const std::vector<PrefixTreeNode> forest = synthetic_prefix_forest(blocks);
  PrefixTreeWidget w;
  w.resize(width, height);
  QPixmap pm(width, height);
  double farMs = 1e9, nearMs = 1e9;
  for (int r = 0; r < reps; ++r) {
    QElapsedTimer t;
    t.start();
    w.setNodes(forest);
    w.render(&pm);
    farMs = std::min(farMs, static_cast<double>(t.nsecsElapsed()) / 1e6);
  }
  const int strips = w.lastPaintedItems();
  const bool farStrips = w.drawsStrips();
  w.setZoom(1.0, w.nodeRect(w.layout().size() / 2).center());
  for (int r = 0; r < reps; ++r) {
    QElapsedTimer t;
    t.start();
    w.render(&pm);
    nearMs = std::min(nearMs, static_cast<double>(t.nsecsElapsed()) / 1e6);
  }
  return QJsonObject{{QStringLiteral("blocks"), w.layout().size()},
                     {QStringLiteral("layout_and_far_frame_ms"), farMs},
                     {QStringLiteral("far_strips"), strips},
                     {QStringLiteral("far_draws_strips"), farStrips},
                     {QStringLiteral("near_frame_ms"), nearMs},
                     {QStringLiteral("near_nodes"), w.lastPaintedItems()},
                     {QStringLiteral("width"), width},
                     {QStringLiteral("height"), height}};
}

}  // namespace kvscope::ui
