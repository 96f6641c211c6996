#pragma once
// `kvscope --screenshot-dir DIR --lesson N|all`: applies each lesson in the real window, steps
// its scenario a lesson-specific number of engine steps (lesson 1 also waits for its no-KV-cache
// comparison to finish), and writes the whole window as DIR/lesson-N.png (lesson-N@2x.png when
// the screen's device pixel ratio is 2, e.g. QT_SCALE_FACTOR=2), then quits.
#include <QObject>
#include <QTimer>

namespace kvscope::ui {

class MainWindow;

class LessonScreenshotDriver : public QObject {
  Q_OBJECT
 public:
  // `lessons`: the numbers to shoot, in order.
  LessonScreenshotDriver(MainWindow* w, QString dir, QList<int> lessons, QObject* parent = nullptr);
  void start();
  QStringList written() const { return written_; }

 signals:
  void finished(int exitCode);

 private:
  enum class Phase { Apply, WaitReady, Stepping, Shoot };
  void tick();
  void shoot(int number);

  MainWindow* win_;
  QString dir_;
  QList<int> lessons_;
  int index_ = 0;
  Phase phase_ = Phase::Apply;
  QTimer poll_;
  qint64 phaseStartMs_ = 0, lastProgressMs_ = 0;
  quint64 lastStep_ = 0;
  QStringList written_;
  int failures_ = 0;
};

}  // namespace kvscope::ui
