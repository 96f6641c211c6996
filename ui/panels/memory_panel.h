#pragma once
// Memory over time: KV blocks used / cached / free (stacked) and generated tokens per second
// (averaged over 0.3 s of engine time: the raw rate spikes at the start of a run), one sample
// per delivered snapshot (the plot merges them into at most ~600 points), against the engine's own clock; preemptions as red markers. Drag to
// pan, wheel to zoom (either axis when hovering it), "Follow" keeps the newest data in view.
// Exports the plot as PNG and the samples as CSV. With a hybrid KV cache (Gemma 3) the stack is
// the global layers' pool and a dashed line shows the blocks in use in the sliding layers' pool.
// A hybrid recurrent model (Qwen3.5, LFM2, Granite 4.0-H) adds a line under the plot that keeps
// its two kinds of memory apart: the state, fixed per sequence, and the KV, per token.
#include <QWidget>
#include <memory>
#include <vector>

#include "panels/snapshot_view.h"

class QCheckBox;
class QCustomPlot;
class QCPGraph;
class QLabel;

class QTimer;
namespace kvscope::ui {

class LiveLabel;
class ThinnedSeries;

class MemoryPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  explicit MemoryPanel(QWidget* parent = nullptr);
  ~MemoryPanel() override;
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events = nullptr) override;  // one sample
  void resetForEngine(const ModelInfo&) override { clear(); }
  void clear();
  bool exportPng(const QString& path, int width = 1200, int height = 500);
  bool exportCsv(const QString& path) const;
  int sampleCount() const { return static_cast<int>(samples_.size()); }
  QCustomPlot* plot() const { return plot_; }
  // The dashed sliding-pool line (hidden, with no legend entry, until a hybrid snapshot arrives).
  QCPGraph* slidingGraph() const { return sliding_; }
  // Hybrid recurrent models: "fixed per sequence ... · per token ..." (hidden for other models).
  LiveLabel* stateLine() const { return stateInfo_; }
  void applyTheme();
  // Compare view: both panels show the same x range.
  void setXRange(double lo, double hi);
  double lastTime() const { return samples_.empty() ? 0.0 : samples_.back().t; }
  // Compare view: while following, show at least up to time t, so two runs share one time scale.
  void setSharedEnd(double t);

 signals:
  void xRangeChanged(double lo, double hi);

 private:
  struct Sample {
    double t;
    uint64_t step;
    int used, cached, free;
    double tokensPerS, wastePct;
    uint64_t preemptions;
    int slidingUsed, slidingTotal;  // the hybrid KV cache's sliding pool; 0 / 0 without one
    qint64 stateBytes, kvBytes;     // recurrent state held (fixed per sequence), KV blocks held
  };
  void follow();
  void showStateLine(const Snapshot& s);
  void requestReplot();  // coalesced: at most ~10 replots a second, none while hidden
  void showEvent(QShowEvent* e) override;
  void resizeEvent(QResizeEvent* e) override;

  QCustomPlot* plot_;
  QCPGraph *used_, *cached_, *free_, *tps_, *preempt_, *sliding_;
  std::unique_ptr<ThinnedSeries> series_;  // used_, cached_, free_, tps_, sliding_ (every sample stays in samples_)
  QCheckBox* follow_;
  LiveLabel* info_;
  LiveLabel* stateInfo_;
  std::vector<Sample> samples_;
  int maxTotal_ = 0;  // running maxima, so following the data costs O(1) per sample
  double maxTps_ = 0;
  bool programmaticRange_ = false;
  double sharedEnd_ = 0;
  bool replotPending_ = false;
  QTimer* replotTimer_;
};

}  // namespace kvscope::ui
