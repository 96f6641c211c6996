#pragma once
// Teaching mode, "latent KV": one prompt through two small synthetic models of the same width,
// one with DeepSeek's multi-head latent attention (deepseek2: a single cached row of latent +
// RoPE key per token and layer, shared by every head) and one with grouped-query attention
// (llama: a key and a value per KV head), each engine given the same KV memory budget. Side by
// side, every number read from that engine's own model and snapshots: the row it caches and its
// formula, the bytes per token, the blocks the same memory holds, and the blocks and bytes the
// prompt fills. The models are written by kvscope's synthetic writer into a temporary folder
// (random weights: the text is gibberish, the cache is real).
#include <QWidget>
#include <array>

#include "engine_bridge/synthetic_pair.h"

class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;

namespace kvscope::ui {

class LiveLabel;

class LatentKvPanel : public QWidget {
  Q_OBJECT
 public:
  enum RunIndex { Latent = 0, Gqa = 1 };
  enum Row { ModelRow = 0, RowFormula, PerToken, Pool, Filled, InUse, kRows };

  explicit LatentKvPanel(QWidget* parent = nullptr);
  ~LatentKvPanel() override;

  // Writes both models (once) and runs the prompt on each. False with *why if it cannot start.
  bool start(QString* why = nullptr);
  void shutdown();
  bool isRunning() const { return pair_->isRunning(); }
  bool finished() const { return pair_->finished(); }
  QPushButton* runButton() const { return run_; }
  QLabel* cell(int run, Row row) const { return cells_[static_cast<size_t>(run)][static_cast<size_t>(row)]; }
  SnapshotPtr lastSnapshot(int run) const { return runs_[static_cast<size_t>(run)].last; }
  int peakBlocks(int run) const { return runs_[static_cast<size_t>(run)].peakBlocks; }
  // The memory budget both pools get, and the KV element type (f16).
  static constexpr int64_t kBudgetBytes = 512 << 10;

 signals:
  void runFinished();

 private:
  struct Run {
    SnapshotPtr last;
    ModelConfig config;
    // The most the run held at once: a finished request's blocks go back to the pool.
    int peakBlocks = 0;
    qint64 peakTokens = 0, peakBytes = 0;
  };
  void onLoaded(int i, const ModelInfo& info);
  void onSnapshot(int i, const SnapshotPtr& s);
  void fill(int i);
  void updateStatus();

  QLineEdit* prompt_;
  QSpinBox* tokens_;
  QPushButton* run_;
  LiveLabel* status_;
  std::array<std::array<QLabel*, kRows>, 2> cells_{};
  SyntheticPair* pair_;
  std::array<Run, 2> runs_;
  QString error_;  // why the last start was refused
};

}  // namespace kvscope::ui
