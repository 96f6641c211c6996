#pragma once
// The Lessons panel (Help > Lessons, `kvscope --lesson N`): walks through the nine guided
// lessons of lesson_table.cpp on the real engine. Applying a lesson reads its preset into one
// typed EngineConfigEdit, shows it in the Settings panel and presses Apply there (so the panel's validation refuses what it refuses for
// anyone, and the engine is rebuilt the usual way), queues the lesson's scenario with the
// engine paused, and raises and frames the panel to look at. Step runs one engine step and
// shows the teaching captions of that step's block events; Reset re-applies the lesson from
// its start; Previous / Next move through the list.
#include <QElapsedTimer>
#include <QPointer>
#include <QWidget>

#include "lessons/lesson.h"
#include "lessons/lesson_stage.h"
#include "panels/snapshot_view.h"

class QComboBox;
class QLabel;
class QPushButton;

namespace kvscope::ui {

class LessonsPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  explicit LessonsPanel(LessonStage* stage, QWidget* parent = nullptr);

  // Shows and applies lesson `number` (1-based); before the first engine exists it is applied
  // as soon as one does. False for an unknown number.
  bool showLesson(int number);
  // Applies `l` (a built-in lesson or any other). False, with the reason shown, when the Settings
  // panel refuses its settings: the running engine is then left as it was.
  bool applyLesson(const Lesson& l);
  void step();   // one engine step; its captions follow with the snapshot
  void reset();  // the current lesson again, from the start
  void next();
  void previous();

  const Lesson& lesson() const { return lesson_; }
  bool isReady() const { return ready_; }                // its engine is built and its scenario queued
  QWidget* highlighted() const { return highlighted_; }  // the widget framed to look at
  QWidget* lookAtTarget(const Lesson& l) const;          // what `l` points at (null if missing)
  quint64 lastSteppedTo() const { return steppedTo_; }   // the engine step the last Step reached
  QStringList lastCaptions() const { return captions_; }

  QLabel* titleLabel() const { return title_; }
  QLabel* stepsLabel() const { return steps_; }
  QLabel* statusLabel() const { return status_; }
  QLabel* captionLabel() const { return caption_; }
  QLabel* engineLabel() const { return engine_; }
  QPushButton* stepButton() const { return stepBtn_; }
  QPushButton* resetButton() const { return resetBtn_; }
  QPushButton* nextButton() const { return nextBtn_; }
  QPushButton* previousButton() const { return prevBtn_; }
  QPushButton* playButton() const { return playBtn_; }

  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events) override;
  void resetForEngine(const ModelInfo& info) override;

 signals:
  void lessonReady(int number);
  void stepped(quint64 step);
  void refused(const QString& why);

 private:
  void showText(const Lesson& l);
  void finishApply();
  void lookAt(const Lesson& l);
  void showStepCaptions(const SnapshotPtr& snap, const EventBatch& events);
  void showEngineFacts(const Snapshot& s);
  void setStatus(const QString& text, bool problem);

  LessonStage* stage_;
  Lesson lesson_;
  int queued_ = 0;         // a lesson to apply once the first engine exists
  bool awaiting_ = false;  // Apply was pressed for the lesson; waiting for the rebuilt engine
  bool ready_ = false;
  bool stepping_ = false;                   // a Step was asked for; its snapshot has not come yet
  quint64 stepTarget_ = 0, steppedTo_ = 0;  // the step the Step clicks ask for, and the last one shown
  QStringList captions_;
  SnapshotPtr engineSnap_;  // the newest snapshot of the current engine (null right after a rebuild)
  QPointer<QWidget> highlighted_;
  QElapsedTimer factsClock_;  // when the engine line was last rewritten

  QComboBox* pick_;
  QLabel *title_, *steps_, *look_, *status_, *caption_, *engine_;
  QPushButton *prevBtn_, *resetBtn_, *stepBtn_, *playBtn_, *nextBtn_;
};

}  // namespace kvscope::ui
