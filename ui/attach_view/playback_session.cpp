#include "attach_view/playback_session.h"

#include <QFileInfo>
#include <algorithm>

#include "attach/event_recording.h"
#include "attach/recording_playback.h"

namespace kvscope::ui {
namespace {

// Lines re-applied between two looks at a newer seek (and two progress reports): some tens of
// milliseconds of work (docs/attach.md has the rate).
constexpr size_t kStepLines = 20000;

}  // namespace

PlaybackSession::PlaybackSession(QString path, QObject* parent) : QObject(parent) {
  qRegisterMetaType<std::shared_ptr<const AttachPicture>>();
  qRegisterMetaType<RecordingInfo>();
  thread_ = QThread::create([this, path] { run(path); });
}

void PlaybackSession::start() { thread_->start(); }

PlaybackSession::~PlaybackSession() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_->wait();
  delete thread_;
}

void PlaybackSession::seek(double seconds) {
  {
    std::lock_guard<std::mutex> l(mu_);
    target_ = seconds;
  }
  cv_.notify_all();
}

void PlaybackSession::run(QString path) {
  std::shared_ptr<attach::Recording> rec;
  try {
    const double size = std::max<double>(1, static_cast<double>(QFileInfo(path).size()));
    rec = std::make_shared<attach::Recording>(attach::read_recording_file(path.toStdString(), {}, [&](uint64_t bytes) {
      emit progress(tr("Reading the recording"), static_cast<double>(bytes) / size);
      return !stop_;
    }));
  } catch (const attach::RecordingError& e) {
    if (!stop_) emit failed(QString::fromUtf8(e.what()));
    return;
  } catch (const std::exception& e) {  // out of memory on a huge file, say
    emit failed(QString::fromUtf8(e.what()));
    return;
  }
  emit loaded({path, rec->started, rec->end(), rec->lines.size(), rec->instances.size(), rec->cut_off});
  try {
    attach::RecordingPlayback p(rec);
    play(p);
  } catch (const std::exception& e) { emit failed(QString::fromUtf8(e.what())); }
}

void PlaybackSession::play(attach::RecordingPlayback& p) {
  const auto& lines = p.recording().lines;
  while (true) {
    double target = 0;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || target_; });
      if (stop_) return;
      target = p.start() + *target_;
      target_.reset();
    }
    // Going back starts over (a seek to the start itself is instant); then forward in steps.
    if (target < p.time()) p.seek(p.start());
    bool superseded = false;
    while (!stop_ && !superseded) {
      const size_t step_end = std::min(lines.size(), p.lines_applied() + kStepLines);
      const double step_t = step_end < lines.size() ? std::min(target, lines[step_end].t) : target;
      p.seek(step_t);
      if (step_t >= target) break;
      emit progress(tr("Reconstructing"), (step_t - p.start()) / std::max(1e-9, target - p.start()));
      std::lock_guard<std::mutex> l(mu_);
      superseded = target_.has_value();
    }
    if (stop_ || superseded) continue;
    auto pic = make_attach_picture(p, {}, p.timelines());
    pic->taken_at = p.time();  // the block map's ages are as of the recorded time
    for (auto& ip : pic->instances) ip.metrics = tr("/metrics are not recorded");
    emit updated(pic, p.time() - p.start());
  }
}

}  // namespace kvscope::ui
