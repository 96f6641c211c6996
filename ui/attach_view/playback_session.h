#pragma once
// The window's side of a recording (kvscope-cli attach --record): the file read and the attach
// rebuilt on their own thread (attach/recording_playback.h), publishing the same AttachPicture a
// live AttachSession publishes, for the time the scrubber asks. Seeks are coalesced: only the
// newest is worked on, and a long reconstruction is done in steps that report their progress
// and give way to a newer seek, so the UI thread never waits on a file or a replay.
#include <QObject>
#include <QString>
#include <QThread>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "attach_view/attach_session.h"

namespace kvscope::attach {
class RecordingPlayback;
}

namespace kvscope::ui {

struct RecordingInfo {
  QString path;
  double started = 0, end = 0;  // Unix seconds
  size_t lines = 0, instances = 0;
  bool cut_off = false;  // the last line was cut short (a killed attach) and skipped
};

class PlaybackSession : public QObject {
  Q_OBJECT
 public:
  explicit PlaybackSession(QString path, QObject* parent = nullptr);
  ~PlaybackSession() override;  // stops the thread
  // Starts reading on the session's thread; call once, after connecting the signals (a bad or
  // missing file fails at once, and a signal emitted before its connection is lost).
  void start();
  // Show the attach as it was `seconds` after the recording started (any thread).
  void seek(double seconds);
 signals:
  void progress(QString what, double fraction);  // reading the file, or reconstructing
  void loaded(kvscope::ui::RecordingInfo info);
  void updated(std::shared_ptr<const AttachPicture> picture, double seconds);
  void failed(QString why);

 private:
  void run(QString path);
  void play(attach::RecordingPlayback& p);  // answers seeks until stopped
  QThread* thread_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<double> target_;  // the newest seek not yet worked on
  std::atomic<bool> stop_{false};
};

}  // namespace kvscope::ui

Q_DECLARE_METATYPE(kvscope::ui::RecordingInfo)
