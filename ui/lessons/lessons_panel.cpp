#include "lessons/lessons_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDockWidget>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>

#include "panels/captions_panel.h"
#include "widgets/highlight_frame.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

constexpr int kMaxCaptionLines = 6;  // a busy step's other events are counted, not listed

QLabel* wrapped_label() {
  auto* l = new QLabel;
  l->setWordWrap(true);
  l->setTextFormat(Qt::RichText);
  l->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  return l;
}

}  // namespace

LessonsPanel::LessonsPanel(LessonStage* stage, QWidget* parent) : QWidget(parent), stage_(stage) {
  pick_ = new QComboBox;
  for (const Lesson& l : builtin_lessons()) pick_->addItem(tr("%1. %2").arg(l.number).arg(l.title), l.number);
  pick_->setToolTip(tr("Choose a lesson: it applies its settings and scenario at once."));
  pick_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);  // never wider than the dock
  pick_->setMinimumContentsLength(12);
  title_ = new QLabel;
  title_->setWordWrap(true);
  title_->setStyleSheet(QStringLiteral("font-weight:bold;font-size:120%"));
  steps_ = wrapped_label();
  look_ = wrapped_label();
  status_ = wrapped_label();
  caption_ = wrapped_label();
  caption_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  engine_ = wrapped_label();
  engine_->setToolTip(tr("What the running engine reports in its newest snapshot: the lesson's settings took effect."));

  prevBtn_ = new QPushButton(tr("◀ Previous"));
  resetBtn_ = new QPushButton(tr("Reset"));
  resetBtn_->setToolTip(tr("Rebuild the engine with this lesson's settings and replay its scenario from the start."));
  stepBtn_ = new QPushButton(tr("Step"));
  stepBtn_->setToolTip(tr("Run exactly one engine step, then read what happened to the blocks."));
  playBtn_ = new QPushButton(tr("Play"));
  playBtn_->setCheckable(true);
  playBtn_->setToolTip(tr("Let the engine run on its own (press again to pause)."));
  nextBtn_ = new QPushButton(tr("Next ▶"));
  // Two rows, so the panel fits a narrow dock: Step and Play first, moving around below.
  auto* buttons = new QGridLayout;
  buttons->addWidget(stepBtn_, 0, 0);
  buttons->addWidget(playBtn_, 0, 1);
  buttons->addWidget(resetBtn_, 0, 2);
  buttons->addWidget(prevBtn_, 1, 0);
  buttons->addWidget(nextBtn_, 1, 2);
  for (QPushButton* b : {prevBtn_, resetBtn_, stepBtn_, playBtn_, nextBtn_}) b->setMinimumWidth(40);

  auto* content = new QWidget;
  auto* v = new QVBoxLayout(content);
  v->addWidget(pick_);
  v->addWidget(title_);
  v->addWidget(steps_);
  v->addWidget(look_);
  v->addLayout(buttons);
  v->addWidget(status_);
  v->addWidget(caption_);
  v->addWidget(engine_);
  v->addStretch(1);
  fill_with_scroll_area(this, content, /*wrapWidth=*/true);

  connect(pick_, &QComboBox::activated, this, [this](int i) { showLesson(pick_->itemData(i).toInt()); });
  connect(prevBtn_, &QPushButton::clicked, this, &LessonsPanel::previous);
  connect(nextBtn_, &QPushButton::clicked, this, &LessonsPanel::next);
  connect(resetBtn_, &QPushButton::clicked, this, &LessonsPanel::reset);
  connect(stepBtn_, &QPushButton::clicked, this, &LessonsPanel::step);
  connect(playBtn_, &QPushButton::toggled, stage_->host(), [this](bool on) { stage_->host()->setPaused(!on); });
  connect(stage_->host()->worker(), &EngineThreadWorker::pausedChanged, this, [this](bool p) {
    const QSignalBlocker b(playBtn_);
    playBtn_->setChecked(!p);
    playBtn_->setText(p ? tr("Play") : tr("Pause"));
  });
  connect(stage_->host(), &EngineHost::error, this, [this](const QString& msg) {
    if (!awaiting_) return;
    awaiting_ = false;  // the engine refused what the panel let through: say so here too
    setStatus(tr("The engine refused this lesson's settings: %1").arg(msg.toHtmlEscaped()), true);
    emit refused(msg);
  });
  lesson_ = builtin_lessons().front();
  showText(lesson_);
  setStatus(tr("Pick a lesson, or press Reset to start lesson 1."), false);
}

bool LessonsPanel::showLesson(int number) {
  const Lesson* l = find_lesson(number);
  if (!l) {
    setStatus(tr("There is no lesson %1: the lessons are 1 to %2.").arg(number).arg(builtin_lessons().size()), true);
    return false;
  }
  if (!stage_->host()->hasEngine()) {
    lesson_ = *l;
    showText(lesson_);
    queued_ = number;  // applied by resetForEngine when the model has loaded
    setStatus(tr("Waiting for the model to load…"), false);
    return true;
  }
  return applyLesson(*l);
}

bool LessonsPanel::applyLesson(const Lesson& l) {
  lesson_ = l;
  queued_ = 0;
  ready_ = false;
  stepping_ = false;
  steppedTo_ = 0;
  showText(l);
  EngineConfigEdit edit;  // the base settings, then the lesson's own on top
  for (const LessonSettings* list : {&lesson_base_settings(), &l.settings})
    for (const auto& [key, value] : *list)
      if (!parse_config_override(key, value, &edit)) {
        setStatus(
            tr("Refused: the setting %1 = %2 is not one the Settings panel takes.").arg(key, value).toHtmlEscaped(),
            true);
        emit refused(key);
        return false;
      }
  QString why;
  if (!stage_->stageEngineConfig(edit, &why)) {
    // The Settings panel shows the same reason beside the field; the running engine stays.
    setStatus(tr("Refused by the Settings panel: %1").arg(why.toHtmlEscaped()), true);
    emit refused(why);
    return false;
  }
  stage_->host()->setPaused(true);  // a lesson starts at its first step
  awaiting_ = true;
  setStatus(tr("Building the engine with this lesson's settings…"), false);
  stage_->applyStagedEngineConfig();  // the one path every settings change takes
  return true;
}

void LessonsPanel::resetForEngine(const ModelInfo&) {
  engineSnap_.reset();  // the old engine's step count means nothing to the new one
  if (awaiting_) {
    awaiting_ = false;
    // After the window has handed the new engine to every panel (the workload panel included).
    QTimer::singleShot(0, this, &LessonsPanel::finishApply);
  } else if (queued_ > 0) {
    const int n = queued_;
    QTimer::singleShot(0, this, [this, n] { showLesson(n); });
  }
}

void LessonsPanel::finishApply() {
  stage_->host()->setPaused(true);
  if (!lesson_.scenario.isEmpty() && !stage_->runScenario(lesson_.scenario)) {
    setStatus(tr("The scenario %1 could not be started.").arg(lesson_.scenario.toHtmlEscaped()), true);
    return;
  }
  stage_->presetCompareB(lesson_.compareB, lesson_.compareQuality);
  if (lesson_.runNoCacheComparison) stage_->startNoCacheComparison();
  if (lesson_.runLatentComparison) stage_->startLatentComparison();
  if (lesson_.runHybridComparison) stage_->startHybridComparison();
  stage_->clearCaptions();
  lookAt(lesson_);
  ready_ = true;
  captions_.clear();
  caption_->clear();
  setStatus(lesson_.scenario.isEmpty()
                ? tr("Ready.")
                : tr("Ready: the scenario <i>%1</i> is queued and the engine paused. Press Step, or Play.")
                      .arg(lesson_.scenario.toHtmlEscaped()),
            false);
  emit lessonReady(lesson_.number);
}

QWidget* LessonsPanel::lookAtTarget(const Lesson& l) const {
  QWidget* panel = nullptr;
  if (l.lookAt == QLatin1String("blockMap"))
    panel = stage_->centralPanel();
  else if (QDockWidget* d = stage_->panelDock(l.lookAt))
    panel = d->widget();
  if (!panel || l.lookAtWidget.isEmpty()) return panel;
  return panel->findChild<QWidget*>(l.lookAtWidget);
}

void LessonsPanel::lookAt(const Lesson& l) {
  if (QDockWidget* d = stage_->panelDock(l.lookAt)) {
    d->show();
    d->raise();
  }
  QWidget* target = lookAtTarget(l);
  if (highlighted_ != target) delete HighlightFrame::on(highlighted_);  // one place to look at a time
  highlighted_ = target;
  HighlightFrame::flash(highlighted_);
}

void LessonsPanel::showText(const Lesson& l) {
  if (const int i = pick_->findData(l.number); i >= 0) pick_->setCurrentIndex(i);
  title_->setText(tr("Lesson %1 of %2 · %3").arg(l.number).arg(builtin_lessons().size()).arg(l.title));
  QString html = QStringLiteral("<ol style='margin-left:-20px'>");
  for (const QString& s : l.steps) html += QStringLiteral("<li>%1</li>").arg(s.toHtmlEscaped());
  steps_->setText(html + QStringLiteral("</ol>"));
  QString where = l.lookAt == QLatin1String("blockMap") ? tr("Block map") : l.lookAt;
  if (QDockWidget* d = stage_->panelDock(l.lookAt)) where = d->windowTitle();
  look_->setText(tr("<b>Look at:</b> %1 (framed in orange).").arg(where.toHtmlEscaped()));
  const int n = static_cast<int>(builtin_lessons().size());
  prevBtn_->setEnabled(l.number > 1);
  nextBtn_->setEnabled(l.number < n);
}

void LessonsPanel::step() {
  if (!stage_->host()->hasEngine()) return;
  // Clicked again before the last one's snapshot came: one step further than that one.
  stepTarget_ = (stepping_ ? stepTarget_ : (engineSnap_ ? engineSnap_->step : 0)) + 1;
  stepping_ = true;
  stage_->host()->singleStep();
}

void LessonsPanel::reset() { applyLesson(lesson_); }

void LessonsPanel::next() {
  if (find_lesson(lesson_.number + 1)) showLesson(lesson_.number + 1);
}

void LessonsPanel::previous() {
  if (find_lesson(lesson_.number - 1)) showLesson(lesson_.number - 1);
}

void LessonsPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch& events) {
  if (!snap) return;
  engineSnap_ = snap;
  if (stepping_ && snap->step > steppedTo_) showStepCaptions(snap, events);
  // A wrapped label re-lays out the panel on each new text: a few times a second is plenty
  // while the engine plays; a Step's own snapshot is always shown.
  if (isVisible() && (!factsClock_.isValid() || factsClock_.elapsed() > 200 || snap->step == steppedTo_)) {
    factsClock_.start();
    showEngineFacts(*snap);
  }
}

void LessonsPanel::showStepCaptions(const SnapshotPtr& snap, const EventBatch& events) {
  stepping_ = snap->step < stepTarget_;
  steppedTo_ = snap->step;
  captions_.clear();
  if (events)
    for (const BlockEvent& e : *events) captions_ << event_caption(e, snap.get());
  QString html = tr("<b>Step %1 just happened:</b> ").arg(snap->step);
  if (captions_.isEmpty()) {
    html += tr("no block changed hands (every running sequence still had room in its last block).");
  } else {
    html += QStringLiteral("<ul style='margin-left:-20px'>");
    for (int i = 0; i < std::min<int>(kMaxCaptionLines, captions_.size()); ++i)
      html += QStringLiteral("<li>%1</li>").arg(captions_[i].toHtmlEscaped());
    html += QStringLiteral("</ul>");
    if (captions_.size() > kMaxCaptionLines)
      html += tr("…and %1 more in the Teaching captions panel.").arg(captions_.size() - kMaxCaptionLines);
  }
  caption_->setText(html);
  emit stepped(snap->step);
}

void LessonsPanel::showEngineFacts(const Snapshot& s) {
  QString alloc = s.allocator.contiguous
                      ? tr("contiguous (reserves %1)").arg(QString::fromStdString(s.allocator.reserve_policy))
                      : tr("paged");
  QString window = s.window > 0 ? tr("window %1, sinks %2").arg(s.window).arg(s.sinks) : tr("full attention");
  // The hybrid KV cache: each pool's layers store their own bytes per token.
  QString perToken = QString::number(s.memory.kv_bytes_per_token);
  if (s.kv_groups.size() > 1 && s.block_size > 0)
    perToken = tr("%1 (global layers) + %2 (sliding layers)")
                   .arg(s.memory.kv_bytes_per_token)
                   .arg(s.kv_groups[1].bytes_per_block / s.block_size);
  engine_->setText(
      tr("<b>Engine now:</b> step %1 · KV %2, %3 bytes/token · %4 · prefix caching %5 · %6 · blocks used %7 of %8 · "
         "running %9, waiting %10")
          .arg(s.step)
          .arg(QString::fromStdString(s.kv_dtype))
          .arg(perToken)
          .arg(window, s.prefix_caching ? tr("on") : tr("off"), alloc)
          .arg(s.memory.blocks_used)
          .arg(s.memory.blocks_total)
          .arg(s.running)
          .arg(s.waiting));
}

void LessonsPanel::setStatus(const QString& text, bool problem) {
  status_->setStyleSheet(problem ? QStringLiteral("color:#c62828") : QString());
  status_->setText(text);
}

}  // namespace kvscope::ui
