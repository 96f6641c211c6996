#pragma once
// `kvscope --frame-bench`: does the UI thread ever stall while the engine works? Runs a scenario
// (repeated until the time is up) in the real window on a large pool and measures, on the UI
// thread itself:
//   - a 1 ms watchdog timer: the gap between two of its ticks is the longest the event loop was
//     busy with something else (snapshot hand-off, layout, paint, text) — a stall the user feels;
//     with each gap, the CPU time the UI thread itself used in it, which tells work done on the
//     UI thread apart from the OS not scheduling it (a loaded machine);
//   - each paint of the block map (how long drawing the whole pool takes) and of the prefix tree;
//   - each snapshot hand-off to the panels (MainWindow::onSnapshot);
//   - at the end, the prefix tree on a synthetic 16,384-block forest (ui/prefix_tree_bench.h).
// The result is one JSON object (see toJson); nothing here changes what it measures.
#include <QElapsedTimer>
#include <QJsonObject>
#include <QObject>
#include <QTimer>
#include <vector>

#include "engine_bridge/workload_source.h"

namespace kvscope::ui {

class MainWindow;

struct FrameBenchOptions {
  QString scenario = QStringLiteral("many-short-chats");
  double seconds = 10;
  double targetMs = 16;  // one frame at 60 Hz
};

// Sorted-sample statistics of durations in milliseconds.
struct DurationStats {
  qint64 count = 0;
  double maxMs = 0, p50Ms = 0, p99Ms = 0, p999Ms = 0, meanMs = 0;
  static DurationStats of(std::vector<double> samples);
  QJsonObject toJson() const;
};

class FrameBench : public QObject {
  Q_OBJECT
 public:
  FrameBench(MainWindow* w, FrameBenchOptions opts, QObject* parent = nullptr);
  // Waits for the engine, then runs. finished() carries the JSON result (or "error").
  void start();
  QJsonObject result() const { return result_; }

 signals:
  void finished(const QJsonObject& result);

 protected:
  bool eventFilter(QObject* o, QEvent* e) override;

 private:
  void begin();
  void onTick();
  void finish(const QString& error = {});

  MainWindow* win_;
  FrameBenchOptions opts_;
  Scenario scenario_;
  QTimer watchdog_, wait_;
  QElapsedTimer clock_, sinceTick_;
  bool running_ = false, inPaint_ = false;
  std::vector<double> gaps_, gapCpu_, paints_, handoffs_, treePaints_;
  double lastCpuMs_ = 0;
  // What ran inside the current gap, so the worst frames can say where their time went.
  double paintInGap_ = 0, handoffInGap_ = 0;
  struct Frame {
    double wallMs, cpuMs, paintMs, handoffMs;
  };
  std::vector<Frame> worst_;  // the longest few
  qint64 snapshots_ = 0;
  int runs_ = 0, requestsDone_ = 0, lastDone_ = 0;
  int peakUsed_ = 0, peakTreeNodes_ = 0;
  quint64 firstStep_ = 0, firstDecoded_ = 0;
  bool haveFirstStep_ = false;
  QJsonObject result_;
};

}  // namespace kvscope::ui
