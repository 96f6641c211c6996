#pragma once
// Teaching mode, "no KV cache vs cached": one prompt generated twice on the loaded model, each
// run on its own engine worker — first with the KV cache, then with EngineConfig::no_kv_cache
// (after every sampled token the sequence's K/V are thrown away and the whole sequence is
// recomputed) — so the two never compete for the CPU. One QCustomPlot shows, per generated
// token, the tokens the model computed for it and the engine's step time: flat with the cache,
// growing linearly without it. Every point is read from the engine's per-step snapshots
// (Snapshot::step_ms and the tokens_prefilled / tokens_decoded counter deltas, summed over the
// steps that produced that token); nothing is computed from a formula.
#include <QWidget>
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "engine_bridge/engine_host.h"
#include "engine_bridge/engine_settings_source.h"

class QCustomPlot;
class QCPAxisRect;
class QCPGraph;
class QCPItemText;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTimer;

namespace kvscope::ui {

class LiveLabel;

class NoCachePanel : public QWidget {
  Q_OBJECT
 public:
  // One generated token as the snapshots of its run saw it.
  struct Point {
    double stepMs = 0;  // sum of Snapshot::step_ms over the steps that produced this token
    qint64 tokens = 0;  // tokens the model computed in those steps
    int steps = 0;      // engine steps (more than 1 when a long recompute is chunked)
  };
  enum RunIndex { Cached = 0, NoCache = 1 };

  explicit NoCachePanel(const EngineSettingsSource* settings, QWidget* parent = nullptr);
  ~NoCachePanel() override;

  // Builds both engines from the Settings panel's model, block size and KV dtype and runs
  // `prompt` for `newTokens` tokens on each (cached first). False with *why if it cannot start.
  bool start(const QString& prompt, int newTokens, QString* why = nullptr);
  void shutdown();
  bool finished() const;
  bool isRunning() const { return running_; }
  const std::vector<Point>& points(int run) const { return runs_[static_cast<size_t>(run)].points; }
  int promptTokens(int run) const { return runs_[static_cast<size_t>(run)].promptTokens; }
  int missedSteps(int run) const { return runs_[static_cast<size_t>(run)].missedSteps; }
  SnapshotPtr lastSnapshot(int run) const { return runs_[static_cast<size_t>(run)].last; }
  // Both runs produced the same tokens (greedy): nullopt until both finished.
  std::optional<bool> sameTokens() const;
  QString totalsText() const;
  QString statusText() const;
  QCustomPlot* plot() const { return plot_; }
  QLineEdit* promptEdit() const { return prompt_; }
  QSpinBox* tokensBox() const { return tokens_; }
  QPushButton* runButton() const { return run_; }
  bool exportCsv(const QString& path) const;
  void applyTheme();

 signals:
  void runFinished();

 private:
  struct Run {
    std::unique_ptr<EngineHost> host;
    EngineConfig cfg;
    QString name;
    bool loaded = false, submitted = false, active = false, done = false;
    quint64 tag = 0;
    int promptTokens = 0;
    std::optional<TurnStats> stats;
    uint64_t lastStep = 0, lastPrefilled = 0, lastDecoded = 0;
    Point pending;
    int missedSteps = 0;
    std::vector<Point> points;
    SnapshotPtr last;
    QCPGraph *tokGraph = nullptr, *msGraph = nullptr;
  };
  void ensureHost(int i);
  void onSnapshot(int i, const SnapshotPtr& snap);
  void maybeSubmit();
  void checkDone(int i);
  void updateStatus();
  void updateTotals();
  void rescale();
  void requestReplot();

  const EngineSettingsSource* settings_;
  QLineEdit* prompt_;
  QSpinBox* tokens_;
  QPushButton* run_;
  QPushButton* csv_;
  LiveLabel* status_;
  QLabel* totals_;
  QLabel* caption_;
  QCustomPlot* plot_;
  QCPAxisRect* msRect_ = nullptr;
  QCPItemText *cachedLabel_ = nullptr, *noCacheLabel_ = nullptr, *msNote_ = nullptr;
  QTimer* replotTimer_;
  std::array<Run, 2> runs_;
  QString promptText_;
  int newTokens_ = 0;
  bool running_ = false;
  QString error_;
};

}  // namespace kvscope::ui
