#pragma once
// `kvscope --screenshot-dir DIR`: drives the real window through a run (model loaded, a chat
// and a scenario running, single-stepping, the finished run, a compare run, the no-KV-cache
// teaching run) and writes
// one PNG per panel plus the whole window at each of those moments, then quits. Every picture is
// of the real engine at work; nothing is staged.
#include <QObject>
#include <QTimer>
#include <functional>
#include <vector>

namespace kvscope::ui {

class MainWindow;

class ScreenshotDriver : public QObject {
  Q_OBJECT
 public:
  ScreenshotDriver(MainWindow* w, QString dir, QString scenario, QString compareB, QObject* parent = nullptr);
  void start();
  QStringList written() const { return written_; }

 signals:
  void finished(int exitCode);

 private:
  struct Stage {
    QString name;
    std::function<bool()> ready;
    std::function<void()> action;
  };
  void tick();
  void shootAll(const QString& moment);
  void shoot(QWidget* w, const QString& file);
  void shootFloating(QWidget* panel, const QString& file);  // its dock floated at 1280x800

  MainWindow* win_;
  QString dir_, scenario_, compareB_;
  std::vector<Stage> stages_;
  size_t stage_ = 0;
  QTimer poll_;
  qint64 stageStartMs_ = 0;
  QStringList written_;
  int failures_ = 0;
  qint64 storyId_ = -1;  // the request whose story is shot
};

}  // namespace kvscope::ui
