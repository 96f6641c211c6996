#include "devtools/screenshot_driver.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QDockWidget>
#include <QLineEdit>
#include <QListWidget>
#include <QSpinBox>
#include <QTextStream>

#include "panels/block_map_panel.h"
#include "widgets/block_map_widget.h"
#include "panels/chat_panel.h"
#include "controls/compare_panel.h"
#include "shell/main_window.h"
#include "panels/hybrid_state_panel.h"
#include "panels/no_cache_panel.h"
#include "panels/prefix_panel.h"
#include "panels/request_story_panel.h"
#include "controls/settings_panel.h"
#include "panels/workload_panel.h"

namespace kvscope::ui {

namespace {

constexpr qint64 kStageTimeoutMs = 90000;

qint64 now_ms() { return QDateTime::currentMSecsSinceEpoch(); }

void settle() {
  // Let layouts, queued repaints and queued plot replots run before grabbing.
  for (int i = 0; i < 5; ++i) QApplication::processEvents();
}

// "block=64,dtype=f16,prefix=flip|on|off,window=256,sinks=4,evict=h2o:20%|off,pool=512,alloc=contiguous|contiguous-request|paged,quality=on|PATH"
// -> the compare panel's B fields.
void apply_compare_spec(ComparePanel* cmp, const SettingsPanel* settings, const QString& spec) {
  for (const QString& kv : spec.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    const QString k = kv.section(QLatin1Char('='), 0, 0).trimmed(), v = kv.section(QLatin1Char('='), 1).trimmed();
    if (k == QLatin1String("block"))
      cmp->blockSizeB()->setCurrentIndex(std::max(0, cmp->blockSizeB()->findData(v.toInt())));
    else if (k == QLatin1String("dtype"))
      cmp->dtypeB()->setCurrentIndex(std::max(0, cmp->dtypeB()->findData(v)));
    else if (k == QLatin1String("window"))
      cmp->windowB()->setText(v);
    else if (k == QLatin1String("sinks"))
      cmp->sinksB()->setText(v);
    else if (k == QLatin1String("evict"))
      cmp->evictB()->setText(v);
    else if (k == QLatin1String("pool"))
      cmp->poolB()->setText(v);
    else if (k == QLatin1String("quality")) {
      // quality=on (the first shipped text) or quality=PATH: score a text after the scenario.
      cmp->qualityRun()->setChecked(v != QLatin1String("off"));
      if (v != QLatin1String("on") && v != QLatin1String("off")) cmp->qualityText()->setEditText(v);
    } else if (k == QLatin1String("alloc"))
      cmp->allocatorB()->setCurrentIndex(v == QLatin1String("contiguous")           ? 2
                                         : v == QLatin1String("contiguous-request") ? 3
                                                                                    : 1);
    else if (k == QLatin1String("prefix")) {
      const bool aOn = settings->prefixBox()->isChecked();
      cmp->prefixB()->setChecked(v == QLatin1String("flip") || (v == QLatin1String("off") && aOn) ||
                                 (v == QLatin1String("on") && !aOn));
    }
  }
}

}  // namespace

ScreenshotDriver::ScreenshotDriver(MainWindow* w, QString dir, QString scenario, QString compareB, QObject* parent)
    : QObject(parent), win_(w), dir_(std::move(dir)), scenario_(std::move(scenario)), compareB_(std::move(compareB)) {
  if (scenario_.isEmpty()) scenario_ = QStringLiteral("shared-system-prompt");
  if (compareB_.isEmpty()) compareB_ = QStringLiteral("prefix=flip");
  poll_.setInterval(50);
  connect(&poll_, &QTimer::timeout, this, &ScreenshotDriver::tick);

  EngineHost* host = win_->host();
  auto after = [this](qint64 ms) { return [this, ms] { return now_ms() - stageStartMs_ >= ms; }; };
  auto chat = [this] { return win_->chatPanel()->current(); };
  // Panels are shot while the engine is paused, so every picture of one moment shows the same step.
  auto pausedAndDelivered = [this, host] { return host->isPaused() && now_ms() - stageStartMs_ > 300; };
  stages_.push_back({QStringLiteral("model loaded"),
                     [host] { return host->hasEngine() && host->latest() && !host->isLoading(); },
                     [this, chat] {
                       shootAll(QStringLiteral("1-loaded"));
                       win_->workloadPanel()->setStepDelay(25);  // slow enough to catch the run mid-way
                       chat()->send(QStringLiteral("Once upon a time there was a little dog named Spot."));
                       if (!win_->workloadPanel()->run(scenario_)) ++failures_;
                     }});
  stages_.push_back({QStringLiteral("running"),
                     [this] {
                       const auto* wl = win_->workloadPanel();
                       return (wl->total() > 0 && wl->done() * 3 >= wl->total()) || now_ms() - stageStartMs_ > 15000;
                     },
                     [host] { host->setPaused(true); }});
  stages_.push_back({QStringLiteral("paused"), pausedAndDelivered, [this] { shootAll(QStringLiteral("2-running")); }});
  for (int i = 0; i < 3; ++i)
    stages_.push_back({QStringLiteral("single step"), after(200), [host] { host->singleStep(); }});
  stages_.push_back({QStringLiteral("stepped"), after(400), [this, host] {
                       shootAll(QStringLiteral("3-single-step"));
                       host->setPaused(false);
                     }});
  stages_.push_back({QStringLiteral("workload done"),
                     [this, chat] {
                       const auto* wl = win_->workloadPanel();
                       return wl->total() > 0 && wl->done() >= wl->total() && !chat()->isBusy();
                     },
                     [chat] { chat()->send(QStringLiteral("Spot ran to the park and")); }});
  // Catch the second turn mid-reply: its prompt (turn 1 + new text) reuses turn 1's blocks.
  stages_.push_back({QStringLiteral("second turn generating"),
                     [host, chat] {
                       const SnapshotPtr s = host->latest();
                       if (!s || chat()->activeSeq() < 0) return false;
                       for (const SeqSnap& q : s->seqs)
                         if (q.id == chat()->activeSeq()) return q.generated >= 24 || q.state == SeqState::Finished;
                       return false;
                     },
                     [host] { host->setPaused(true); }});
  stages_.push_back({QStringLiteral("paused on turn 2"), pausedAndDelivered, [this, chat, host] {
                       win_->blockMapPanel()->map()->setHighlight(chat()->activeSeq());
                       shootAll(QStringLiteral("4-chat-turn2"));
                       shootFloating(win_->prefixPanel(), QStringLiteral("4-prefix-tree.png"));  // the tree needs room
                       win_->blockMapPanel()->map()->setHighlight(-1);
                       win_->workloadPanel()->setStepDelay(0);
                       host->setPaused(false);
                     }});
  stages_.push_back({QStringLiteral("all done"), [chat] { return chat()->turns() >= 2 && !chat()->isBusy(); },
                     [this, host, chat] {
                       shootAll(QStringLiteral("5-done"));
                       // The story view on the most telling request: one that was preempted,
                       // else the second chat turn (its prefix hit and why it stopped).
                       storyId_ = chat()->lastStats() ? chat()->lastStats()->id : -1;
                       if (const SnapshotPtr snap = host->latest())
                         for (const SeqSnap& q : snap->seqs)
                           if (q.preemptions > 0) storyId_ = q.id;
                       win_->panel<RequestStoryPanel>()->showRequest(storyId_);
                     }});
  stages_.push_back(
      {QStringLiteral("story shown"),
       [this] { return win_->panel<RequestStoryPanel>()->story().id == storyId_ || now_ms() - stageStartMs_ > 5000; },
       [this] { shootFloating(win_->panel<RequestStoryPanel>(), QStringLiteral("5-story.png")); }});
  stages_.push_back({QStringLiteral("compare started"), [] { return true; },
                     [this] {
                       apply_compare_spec(win_->comparePanel(), win_->settingsPanel(), compareB_);
                       win_->comparePanel()->setStepDelay(15);
                       QString why;
                       if (!win_->comparePanel()->start(scenario_, &why)) {
                         QTextStream(stderr) << "compare: " << why << '\n';
                         ++failures_;
                       }
                     }});
  stages_.push_back({QStringLiteral("compare running"),
                     [this] { return win_->comparePanel()->progressPercent() >= 40; },
                     [this] { shootFloating(win_->comparePanel(), QStringLiteral("6-compare-running.png")); }});
  stages_.push_back({QStringLiteral("compare finished"), [this] { return win_->comparePanel()->finished(); },
                     [this] { shootFloating(win_->comparePanel(), QStringLiteral("7-compare-done.png")); }});
  // Teaching: the same prompt with and without a KV cache, 200 tokens each, on the loaded model.
  stages_.push_back({QStringLiteral("no-KV-cache run started"), [] { return true; },
                     [this] {
                       NoCachePanel* p = win_->noCachePanel();
                       QString why;
                       if (!p->start(p->promptEdit()->text(), p->tokensBox()->value(), &why)) {
                         QTextStream(stderr) << "no-KV-cache run: " << why << '\n';
                         ++failures_;
                       }
                     }});
  stages_.push_back({QStringLiteral("no-KV-cache run finished"), [this] { return !win_->noCachePanel()->isRunning(); },
                     [this] { shootFloating(win_->noCachePanel(), QStringLiteral("8-teaching-no-kv-cache.png")); }});
  // Teaching: a hybrid's fixed state against a same-width model's KV (its own synthetic models).
  stages_.push_back({QStringLiteral("hybrid-state run started"), [] { return true; },
                     [this] {
                       QString why;
                       if (!win_->hybridStatePanel()->start(&why)) {
                         QTextStream(stderr) << "hybrid-state run: " << why << '\n';
                         ++failures_;
                       }
                     }});
  stages_.push_back(
      {QStringLiteral("hybrid-state run finished"), [this] { return !win_->hybridStatePanel()->isRunning(); },
       [this] { shootFloating(win_->hybridStatePanel(), QStringLiteral("9-teaching-hybrid-state.png")); }});
}

void ScreenshotDriver::shootFloating(QWidget* panel, const QString& file) {
  // The compare and teaching views need room: float them at window size for their pictures.
  QDockWidget* dock = nullptr;
  for (QDockWidget* d : win_->panelDocks())
    if (d->widget() == panel) dock = d;
  if (!dock) return;
  dock->setFloating(true);
  dock->resize(1280, 800);
  settle();
  shoot(dock->widget(), file);
  dock->setFloating(false);
}

void ScreenshotDriver::start() {
  QDir().mkpath(dir_);
  stageStartMs_ = now_ms();
  poll_.start();
}

void ScreenshotDriver::tick() {
  if (stage_ >= stages_.size()) {
    poll_.stop();
    QTextStream(stdout) << "screenshots: wrote " << written_.size() << " files to " << dir_ << '\n';
    emit finished(failures_ ? 1 : 0);
    return;
  }
  Stage& s = stages_[stage_];
  if (!s.ready()) {
    if (now_ms() - stageStartMs_ > kStageTimeoutMs) {
      QTextStream(stderr) << "screenshots: stage '" << s.name << "' timed out; continuing\n";
      ++failures_;
    } else {
      return;
    }
  }
  s.action();
  ++stage_;
  stageStartMs_ = now_ms();
}

void ScreenshotDriver::shoot(QWidget* w, const QString& file) {
  const QString path = QDir(dir_).filePath(file);
  if (w->grab().save(path))
    written_ << path;
  else
    ++failures_;
}

void ScreenshotDriver::shootAll(const QString& moment) {
  settle();
  shoot(win_, moment + QStringLiteral("-window.png"));
  shoot(win_->blockMapPanel(), moment + QStringLiteral("-blockmap.png"));
  // Hybrid KV cache (Gemma 3): the sliding layers' pool too.
  if (QComboBox* groups = win_->blockMapPanel()->groupSelector(); groups->count() > 1) {
    groups->setCurrentIndex(1);
    settle();
    shoot(win_->blockMapPanel(), moment + QStringLiteral("-blockmap-sliding.png"));
    groups->setCurrentIndex(0);
    settle();
  }
  // Tabified docks only lay out their contents when raised.
  for (QDockWidget* d : win_->panelDocks()) {
    if (d->widget() == win_->comparePanel() || d->widget() == win_->noCachePanel() ||
        d->widget() == win_->hybridStatePanel())
      continue;  // shot on their own, at full size
    d->raise();
    settle();
    shoot(d->widget(),
          moment + QLatin1Char('-') + d->objectName().remove(QStringLiteral("Dock")) + QStringLiteral(".png"));
  }
  // Back to the default front tabs.
  for (QDockWidget* d : win_->panelDocks())
    if (d->objectName() == QLatin1String("settingsDock") || d->objectName() == QLatin1String("memoryDock")) d->raise();
  settle();
}

}  // namespace kvscope::ui
