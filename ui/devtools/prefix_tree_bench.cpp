#include "devtools/prefix_tree_bench.h"

#include <QElapsedTimer>
#include <QPixmap>
#include <algorithm>
#include <time.h>

#include "widgets/prefix_tree_widget.h"

namespace kvscope::ui {

namespace {

PrefixTreeNode block(int parent, int refs) {
  PrefixTreeNode n;
  n.parent = parent;
  n.refCount = refs;
  return n;
}

// The UI thread's own CPU time: on a loaded machine the wall clock also counts the time the OS
// ran somebody else, which no drawing code can win back.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Best of reps, wall clock and thread CPU each.
template <class F>
std::pair<double, double> best_of(int reps, F&& f) {
  double wall = 1e9, cpu = 1e9;
  for (int r = 0; r < reps; ++r) {
    QElapsedTimer t;
    t.start();
    const double c0 = thread_cpu_ms();
    f();
    cpu = std::min(cpu, thread_cpu_ms() - c0);
    wall = std::min(wall, static_cast<double>(t.nsecsElapsed()) / 1e6);
  }
  return {wall, cpu};
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
  const auto [farMs, farCpu] = best_of(reps, [&] {
    w.setNodes(forest);
    w.render(&pm);
  });
  const int strips = w.lastPaintedItems();
  const bool farStrips = w.drawsStrips();
  w.setZoom(1.0, w.nodeRect(w.layout().size() / 2).center());
  const auto [nearMs, nearCpu] = best_of(reps, [&] { w.render(&pm); });
  return QJsonObject{{QStringLiteral("blocks"), w.layout().size()},
                     {QStringLiteral("layout_and_far_frame_ms"), farMs},
                     {QStringLiteral("layout_and_far_frame_cpu_ms"), farCpu},
                     {QStringLiteral("far_strips"), strips},
                     {QStringLiteral("far_draws_strips"), farStrips},
                     {QStringLiteral("near_frame_ms"), nearMs},
                     {QStringLiteral("near_frame_cpu_ms"), nearCpu},
                     {QStringLiteral("near_nodes"), w.lastPaintedItems()},
                     {QStringLiteral("width"), width},
                     {QStringLiteral("height"), height}};
}

}  // namespace kvscope::ui
