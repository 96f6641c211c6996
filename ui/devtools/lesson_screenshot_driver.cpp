#include "devtools/lesson_screenshot_driver.h"

#include <QApplication>
#include <QDateTime>
#include <QDir>
#include <QTextStream>

#include "widgets/highlight_frame.h"
#include "lessons/lessons_panel.h"
#include "shell/main_window.h"
#include "panels/hybrid_state_panel.h"
#include "panels/latent_kv_panel.h"
#include "panels/no_cache_panel.h"

namespace kvscope::ui {

namespace {

constexpr qint64 kPhaseTimeoutMs = 120000;
constexpr qint64 kNoProgressMs = 3000;  // the scenario ran out of work before the step count

qint64 now_ms() { return QDateTime::currentMSecsSinceEpoch(); }

// Steps before the picture: enough for each lesson's effect to show on the small test models.
quint64 steps_for(int lesson) {
  switch (lesson) {
    case 3:
      return 90;  // reservations mostly empty
    case 4:
      return 300;  // the first requests have finished and left holes
    case 5:
      return 120;  // the pool runs dry and preempts
    case 6:
      return 60;  // several questions hit the cached system prompt
    case 7:
      return 90;  // sequences grow past the window
    default:
      return 12;
  }
}

}  // namespace

LessonScreenshotDriver::LessonScreenshotDriver(MainWindow* w, QString dir, QList<int> lessons, QObject* parent)
    : QObject(parent), win_(w), dir_(std::move(dir)), lessons_(std::move(lessons)) {
  poll_.setInterval(50);
  connect(&poll_, &QTimer::timeout, this, &LessonScreenshotDriver::tick);
}

void LessonScreenshotDriver::start() {
  QDir().mkpath(dir_);
  phaseStartMs_ = now_ms();
  poll_.start();
}

void LessonScreenshotDriver::tick() {
  if (index_ >= lessons_.size()) {
    poll_.stop();
    for (const QString& p : written_) QTextStream(stdout) << "kvscope: wrote " << p << '\n';
    emit finished(failures_ ? 1 : 0);
    return;
  }
  LessonsPanel* panel = win_->lessonsPanel();
  const int number = lessons_[index_];
  const qint64 t = now_ms();
  if (phase_ != Phase::Apply && t - phaseStartMs_ > kPhaseTimeoutMs) {
    QTextStream(stderr) << "kvscope: lesson " << number << " timed out; shooting it as it is\n";
    ++failures_;
    phase_ = Phase::Shoot;
  }
  switch (phase_) {
    case Phase::Apply:
      if (!win_->host()->hasEngine() || win_->host()->isLoading()) return;  // the first model load
      win_->showLesson(number);
      phase_ = Phase::WaitReady;
      phaseStartMs_ = t;
      return;
    case Phase::WaitReady:
      if (!panel->isReady() || panel->lesson().number != number) return;
      for (quint64 i = 0; i < steps_for(number); ++i) panel->step();
      phase_ = Phase::Stepping;
      lastStep_ = 0;
      lastProgressMs_ = phaseStartMs_ = t;
      return;
    case Phase::Stepping: {
      if (panel->lastSteppedTo() != lastStep_) {
        lastStep_ = panel->lastSteppedTo();
        lastProgressMs_ = t;
      }
      const bool noCacheBusy = (panel->lesson().runNoCacheComparison && win_->noCachePanel()->isRunning()) ||
                               (panel->lesson().runLatentComparison && win_->latentKvPanel()->isRunning()) ||
                               (panel->lesson().runHybridComparison && win_->hybridStatePanel()->isRunning());
      if ((lastStep_ >= steps_for(number) || t - lastProgressMs_ > kNoProgressMs) && !noCacheBusy)
        phase_ = Phase::Shoot;
      return;
    }
    case Phase::Shoot:
      shoot(number);
      ++index_;
      phase_ = Phase::Apply;
      return;
  }
}

void LessonScreenshotDriver::shoot(int number) {
  // The frame the lesson put on its panel, as the learner sees it right after applying.
  HighlightFrame::flash(win_->lessonsPanel()->highlighted());
  for (int i = 0; i < 5; ++i) QApplication::processEvents();
  const bool hiDpi = win_->devicePixelRatioF() > 1.5;
  const QString path =
      QDir(dir_).filePath(QStringLiteral("lesson-%1%2.png").arg(number).arg(hiDpi ? QStringLiteral("@2x") : QString()));
  if (win_->grab().save(path))
    written_ << path;
  else
    ++failures_;
}

}  // namespace kvscope::ui
