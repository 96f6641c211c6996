#pragma once
// Teaching mode, "why Qwen3.5's cache barely grows": one long prompt through two small synthetic
// models of the same width, a qwen35 (Gated DeltaNet in three layers of four: a fixed recurrent
// state per sequence, KV only in every fourth layer) and a qwen3 (attention and KV in every
// layer). Memory held against the tokens in the sequence, both curves on one plot, every number
// read from that engine's own snapshots (the hybrid: state slots held x bytes per slot + KV
// blocks held; the dense model: KV blocks held); the break-even length (where the hybrid's fixed
// state equals the KV its recurrent layers would hold as attention layers) computed from the two
// engines' per-token and per-sequence bytes and where the measured curves cross, printed. The
// models are written by kvscope's synthetic writer into a temporary folder (random weights).
#include <QWidget>
#include <array>
#include <vector>

#include "engine_bridge/synthetic_pair.h"

class QCustomPlot;
class QCPGraph;
class QCPItemStraightLine;
class QLabel;
class QPushButton;
class QSpinBox;

namespace kvscope::ui {

class LiveLabel;

class HybridStatePanel : public QWidget {
  Q_OBJECT
 public:
  enum RunIndex { Hybrid = 0, Dense = 1 };
  struct Point {
    int64_t tokens = 0;  // computed tokens of the sequence
    int64_t state_bytes = 0, kv_bytes = 0;
    int64_t total() const { return state_bytes + kv_bytes; }
  };

  explicit HybridStatePanel(QWidget* parent = nullptr);
  ~HybridStatePanel() override;

  bool start(QString* why = nullptr);  // writes both models (once) and runs the prompt on each
  void shutdown();
  bool isRunning() const { return pair_->isRunning(); }
  bool finished() const { return pair_->finished(); }
  QPushButton* runButton() const { return run_; }
  QSpinBox* promptTokens() const { return tokens_; }
  const std::vector<Point>& points(int run) const { return runs_[static_cast<size_t>(run)].points; }
  SnapshotPtr lastSnapshot(int run) const { return runs_[static_cast<size_t>(run)].last; }
  // From the two engines' own bytes: state per sequence / (dense - hybrid KV bytes per token).
  int64_t breakEvenTokens() const;
  // The first measured length at which the dense model holds at least the hybrid's bytes (-1: none).
  int64_t measuredCrossing() const;
  QString resultText() const;
  QCustomPlot* plot() const { return plot_; }

 signals:
  void runFinished();

 private:
  struct Run {
    SnapshotPtr last;
    std::vector<Point> points;
  };
  void onSnapshot(int i, const SnapshotPtr& s);
  void replot();
  void updateStatus();

  QSpinBox* tokens_;
  QPushButton* run_;
  LiveLabel* status_;
  QLabel* result_;
  QCustomPlot* plot_;
  std::array<QCPGraph*, 2> graphs_{};
  QCPGraph* stateGraph_ = nullptr;  // the hybrid's fixed part alone
  QCPItemStraightLine* breakEven_ = nullptr;
  SyntheticPair* pair_;
  std::array<Run, 2> runs_;
  QString error_;  // why the last start was refused
};

}  // namespace kvscope::ui
