#pragma once
// Prefix sharing: the hash-chain tree of the blocks live sequences point at (a shared prefix is
// one path that several sequences walk, each node a physical block with its ref count), the
// prefix cache's hit/miss counters, and one bar per request showing how much of its prompt came
// from the cache.
#include <QWidget>

#include "snapshot_view.h"

class QLabel;
class QTreeWidget;

namespace kvscope::ui {

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
  void resetForEngine(const ModelInfo& info) override { vocab_ = info.vocab; }
  // Visible: rebuilds (throttled); hidden: keeps the snapshot and rebuilds when shown.
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events = nullptr) override;
  QTreeWidget* tree() const { return tree_; }
  QString countersText() const;
  void rebuildNow();

 protected:
  void showEvent(QShowEvent* e) override;

 private:
  void rebuildSoon(const SnapshotPtr& snap);  // at most one rebuild per kMinRebuildMs
  QLabel* counters_;
  QTreeWidget* tree_;
  CachedBarsWidget* bars_;
  VocabPtr vocab_;
  SnapshotPtr pending_, shown_;
  qint64 lastBuildMs_ = 0;
  bool scheduled_ = false;
};

}  // namespace kvscope::ui
