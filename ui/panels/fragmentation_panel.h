#pragma once
// Fragmentation, measured from the snapshots of whichever allocator the engine runs. Paged: reserved
// vs filled slots, waste % (only each sequence's last block can be partly empty), the pool as one
// bar in physical order — holes between used blocks do not matter, any free block serves any
// sequence. Contiguous baseline: the arena in address order with each reservation's filled and
// empty part and the free holes between them (external fragmentation). Waste % over time below.
#include <QWidget>
#include <memory>

#include "panels/snapshot_view.h"

class QCustomPlot;
class QCPGraph;
class QLabel;

class QTimer;
namespace kvscope::ui {

class ThinnedSeries;

class ArenaBar : public QWidget {
  Q_OBJECT
 public:
  explicit ArenaBar(QWidget* parent = nullptr);
  void setSnapshot(const SnapshotPtr& s);
  QSize sizeHint() const override { return QSize(400, 34); }
  QSize minimumSizeHint() const override { return QSize(100, 34); }

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  SnapshotPtr snap_;
};

class FragmentationPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  explicit FragmentationPanel(QWidget* parent = nullptr);
  ~FragmentationPanel() override;
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events = nullptr) override;
  void resetForEngine(const ModelInfo&) override { clear(); }
  void clear();
  void applyTheme();
  QString summaryText() const;

 protected:
  void showEvent(QShowEvent* e) override;

 private:
  QLabel* numbers_;
  ArenaBar* arena_;
  QCustomPlot* plot_;
  QCPGraph *waste_, *extFrag_;
  std::unique_ptr<ThinnedSeries> series_;  // both graphs, at most ~600 points (see thinned_series.h)
  uint64_t lastStep_ = ~0ull;
  double peakWaste_ = 0;
  int peakUsed_ = 0;
  bool replotPending_ = false;
  QTimer* replotTimer_;
  QTimer* textTimer_;
  void showText(const SnapshotPtr& snap);
  SnapshotPtr pending_;
  void requestReplot();
};

}  // namespace kvscope::ui
