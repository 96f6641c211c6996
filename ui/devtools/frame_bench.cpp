#include "devtools/frame_bench.h"

#include <QDockWidget>
#include <QEvent>
#include <QJsonArray>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <time.h>

#include "panels/block_map_panel.h"
#include "widgets/block_map_widget.h"
#include "shell/main_window.h"
#include "panels/prefix_panel.h"
#include "devtools/prefix_tree_bench.h"
#include "widgets/prefix_tree_widget.h"
#include "panels/workload_panel.h"

namespace kvscope::ui {

namespace {
constexpr int kEngineWaitMs = 120000;

// CPU time of the calling thread.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}
}  // namespace

DurationStats DurationStats::of(std::vector<double> v) {
  DurationStats s;
  s.count = static_cast<qint64>(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  // Nearest-rank percentiles: a reported p99 is a sample that really happened.
  auto pct = [&v](double p) {
    const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
  };
  s.maxMs = v.back();
  s.p50Ms = pct(0.50);
  s.p99Ms = pct(0.99);
  s.p999Ms = pct(0.999);
  s.meanMs = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

QJsonObject DurationStats::toJson() const {
  return {{QStringLiteral("count"), count},  {QStringLiteral("max_ms"), maxMs},   {QStringLiteral("p50_ms"), p50Ms},
          {QStringLiteral("p99_ms"), p99Ms}, {QStringLiteral("p999_ms"), p999Ms}, {QStringLiteral("mean_ms"), meanMs}};
}

FrameBench::FrameBench(MainWindow* w, FrameBenchOptions opts, QObject* parent)
    : QObject(parent), win_(w), opts_(std::move(opts)) {
  // A precise 1 ms timer on the UI thread: it fires late exactly when the event loop was busy.
  watchdog_.setTimerType(Qt::PreciseTimer);
  watchdog_.setInterval(1);
  connect(&watchdog_, &QTimer::timeout, this, &FrameBench::onTick);
  wait_.setInterval(50);
  connect(&wait_, &QTimer::timeout, this, [this] {
    EngineHost* h = win_->host();
    if (h->hasEngine() && h->latest() && !h->isLoading()) {
      wait_.stop();
      begin();
    } else if (!h->isLoading() && !h->hasEngine() && win_->errorCount() > 0) {
      wait_.stop();
      finish(win_->lastError());  // the model could not be loaded: say why at once
    } else if (clock_.elapsed() > kEngineWaitMs) {
      wait_.stop();
      finish(win_->lastError().isEmpty() ? tr("the engine did not start within %1 s").arg(kEngineWaitMs / 1000)
                                         : win_->lastError());
    }
  });
}

void FrameBench::start() {
  try {
    scenario_ = load_scenario(opts_.scenario);
  } catch (const std::exception& e) {
    // Reported through finished() like any other failure, after start() has returned.
    QTimer::singleShot(0, this, [this, why = QString::fromUtf8(e.what())] { finish(why); });
    return;
  }
  clock_.start();
  wait_.start();
}

void FrameBench::begin() {
  EngineHost* h = win_->host();
  connect(h, &EngineHost::snapshot, this, [this](const SnapshotPtr& s, const EventBatch&) {
    if (!running_ || !s) return;
    ++snapshots_;
    // Connected after the window's own handler, so this is the hand-off that just ran.
    handoffs_.push_back(win_->lastSnapshotMs());
    handoffInGap_ += win_->lastSnapshotMs();
    peakUsed_ = std::max(peakUsed_, s->memory.blocks_used);
    peakTreeNodes_ = std::max(peakTreeNodes_, win_->prefixPanel()->tree()->layout().size());
    if (!haveFirstStep_) {
      firstStep_ = s->step;
      firstDecoded_ = s->counters.tokens_decoded;
      haveFirstStep_ = true;
    }
  });
  connect(h->worker(), &EngineThreadWorker::workloadProgress, this, [this](int done, int total) {
    if (!running_ || total <= 0) return;
    requestsDone_ += std::max(0, done - lastDone_);
    lastDone_ = done;
    if (done >= total) {
      // Keep the engine busy for the whole measurement: replay the scenario.
      lastDone_ = 0;
      ++runs_;
      win_->host()->runWorkload(scenario_);
    }
  });
  // The live panels that only work while shown: bring the requests table (right) and the
  // prefix tree (bottom) to the front of their dock tabs, so their cost is measured too.
  for (QDockWidget* d : win_->panelDocks())
    if (d->widget() == win_->workloadPanel() || d->widget() == win_->prefixPanel()) d->raise();
  win_->blockMapPanel()->map()->installEventFilter(this);
  win_->prefixPanel()->tree()->installEventFilter(this);
  running_ = true;
  ++runs_;
  h->runWorkload(scenario_);
  clock_.start();
  sinceTick_.start();
  lastCpuMs_ = thread_cpu_ms();
  watchdog_.start();
  QTimer::singleShot(static_cast<int>(opts_.seconds * 1000), Qt::PreciseTimer, this, [this] { finish(); });
}

void FrameBench::onTick() {
  gaps_.push_back(static_cast<double>(sinceTick_.nsecsElapsed()) / 1e6);
  sinceTick_.start();
  const double cpu = thread_cpu_ms();
  gapCpu_.push_back(cpu - lastCpuMs_);
  lastCpuMs_ = cpu;
  constexpr size_t kWorst = 5;
  const Frame f{gaps_.back(), gapCpu_.back(), paintInGap_, handoffInGap_};
  paintInGap_ = handoffInGap_ = 0;
  if (worst_.size() < kWorst || f.wallMs > worst_.back().wallMs) {
    worst_.push_back(f);
    std::sort(worst_.begin(), worst_.end(), [](const Frame& a, const Frame& b) { return a.wallMs > b.wallMs; });
    if (worst_.size() > kWorst) worst_.pop_back();
  }
}

bool FrameBench::eventFilter(QObject* o, QEvent* e) {
  if (e->type() != QEvent::Paint || inPaint_ || !running_) return QObject::eventFilter(o, e);
  // Deliver the paint event ourselves (same call stack, so the widget paints into the same
  // backing store) to time the whole paint, then tell Qt it has been handled.
  inPaint_ = true;
  QElapsedTimer t;
  t.start();
  o->event(e);
  const double ms = static_cast<double>(t.nsecsElapsed()) / 1e6;
  if (o == win_->prefixPanel()->tree()) {
    treePaints_.push_back(ms);
  } else {
    paints_.push_back(ms);
    paintInGap_ += ms;
  }
  inPaint_ = false;
  return true;
}

void FrameBench::finish(const QString& error) {
  if (!result_.isEmpty()) return;
  watchdog_.stop();
  const bool wasRunning = running_;
  running_ = false;
  win_->blockMapPanel()->map()->removeEventFilter(this);
  win_->prefixPanel()->tree()->removeEventFilter(this);
  QJsonObject r;
  if (!error.isEmpty()) r[QStringLiteral("error")] = error;
  const SnapshotPtr s = win_->host()->latest();
  const DurationStats gaps = DurationStats::of(gaps_), cpu = DurationStats::of(gapCpu_),
                      paints = DurationStats::of(paints_), hand = DurationStats::of(handoffs_);
  r[QStringLiteral("scenario")] = QString::fromStdString(scenario_.name);
  r[QStringLiteral("model")] = win_->host()->modelInfo().path;
  r[QStringLiteral("seconds")] = wasRunning ? static_cast<double>(clock_.elapsed()) / 1000.0 : 0.0;
  r[QStringLiteral("blocks")] = s ? s->memory.blocks_total : 0;
  r[QStringLiteral("block_size")] = s ? s->block_size : 0;
  r[QStringLiteral("peak_blocks_used")] = peakUsed_;
  r[QStringLiteral("steps")] = s && haveFirstStep_ ? static_cast<qint64>(s->step - firstStep_) : 0;
  // The engine's throughput beside the UI's frames: what a Threads setting trades.
  const qint64 decoded = s && haveFirstStep_ ? static_cast<qint64>(s->counters.tokens_decoded - firstDecoded_) : 0;
  r[QStringLiteral("tokens_generated")] = decoded;
  r[QStringLiteral("threads")] = win_->host()->modelInfo().config.threads;
  r[QStringLiteral("snapshots_delivered")] = snapshots_;
  r[QStringLiteral("scenario_runs")] = runs_;
  r[QStringLiteral("requests_done")] = requestsDone_;
  // A frame here is one turn of the UI thread's event loop as the 1 ms watchdog sees it.
  r[QStringLiteral("frames")] = gaps.count;
  r[QStringLiteral("max_frame_ms")] = gaps.maxMs;
  r[QStringLiteral("p50_frame_ms")] = gaps.p50Ms;
  r[QStringLiteral("p99_frame_ms")] = gaps.p99Ms;
  r[QStringLiteral("p999_frame_ms")] = gaps.p999Ms;
  r[QStringLiteral("frames_over_target")] =
      static_cast<qint64>(std::count_if(gaps_.begin(), gaps_.end(), [this](double g) { return g > opts_.targetMs; }));
  r[QStringLiteral("target_ms")] = opts_.targetMs;
  r[QStringLiteral("within_target")] = gaps.count > 0 && gaps.maxMs < opts_.targetMs;
  r[QStringLiteral("watchdog")] = gaps.toJson();
  // The same frames counted in the UI thread's own CPU time: how much of a stall was our work.
  r[QStringLiteral("max_frame_cpu_ms")] = cpu.maxMs;
  r[QStringLiteral("p99_frame_cpu_ms")] = cpu.p99Ms;
  r[QStringLiteral("frame_cpu")] = cpu.toJson();
  QJsonArray worst;
  for (const Frame& f : worst_)
    worst.append(QJsonObject{{QStringLiteral("wall_ms"), f.wallMs},
                             {QStringLiteral("ui_cpu_ms"), f.cpuMs},
                             {QStringLiteral("block_map_paint_ms"), f.paintMs},
                             {QStringLiteral("snapshot_handoff_ms"), f.handoffMs}});
  r[QStringLiteral("worst_frames")] = worst;
  r[QStringLiteral("block_map_paint")] = paints.toJson();
  r[QStringLiteral("snapshot_handoff")] = hand.toJson();
  // The drawn prefix tree: its paints during the run (as big as the scenario made it), then the
  // same widget on a synthetic 16,384-block forest, far (strips) and near (nodes with tokens).
  r[QStringLiteral("prefix_tree_paint")] = DurationStats::of(treePaints_).toJson();
  r[QStringLiteral("prefix_tree_peak_nodes")] = peakTreeNodes_;
  r[QStringLiteral("prefix_tree_16k")] = measure_prefix_tree(16384);
  QJsonObject byPanel;
  for (auto it = win_->worstPanelMs().begin(); it != win_->worstPanelMs().end(); ++it) byPanel[it.key()] = it.value();
  r[QStringLiteral("snapshot_handoff_max_ms_by_panel")] = byPanel;  // since the window opened
  result_ = r;
  emit finished(r);
}

}  // namespace kvscope::ui
