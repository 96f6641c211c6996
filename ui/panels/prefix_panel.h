#pragma once
// Prefix sharing: the prefix cache's hit/miss counters above a drawn hash-chain tree (one node
// per cached or held block, its edge to the block before it; a shared prefix is one path that
// several sequences walk), and one bar per request showing how much of its prompt came from the
// cache.
#include <QWidget>

#include "panels/prefix_tree_engine_source.h"
#include "panels/snapshot_view.h"

class QLabel;

namespace kvscope::ui {

class PrefixTreeWidget;

// One horizontal bar per request: prompt tokens, the cached part highlighted.
class CachedBarsWidget : public QWidget {
  Q_OBJECT
 public:
  explicit CachedBarsWidget(QWidget* parent = nullptr);
  void setSnapshot(const SnapshotPtr& s);
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override { return QSize(160, 60); }

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  SnapshotPtr snap_;
};

class PrefixPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  explicit PrefixPanel(QWidget* parent = nullptr);
  void resetForEngine(const ModelInfo& info) override;
  // Visible: rebuilds (throttled); hidden: keeps the snapshot and rebuilds when shown.
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events = nullptr) override;
  PrefixTreeWidget* tree() const { return tree_; }
  QString countersText() const;
  QString treeCaption() const;
  void rebuildNow();

 protected:
  void showEvent(QShowEvent* e) override;

 private:
  void rebuildSoon(const SnapshotPtr& snap);  // at most one rebuild per kMinRebuildMs
  QLabel* counters_;
  QLabel* treeCaption_;
  PrefixTreeWidget* tree_;
  EnginePrefixTree source_;
  CachedBarsWidget* bars_;
  SnapshotPtr pending_, shown_;
  qint64 lastBuildMs_ = 0;
  bool scheduled_ = false;
};

}  // namespace kvscope::ui
