#include "attach/recording_playback.h"

#include <algorithm>
#include <limits>

namespace kvscope::attach {

// Answers an instance's replay requests with its recorded answers, in order: the live attach
// made the same requests in the same order, because it applied the same messages before them.
class RecordedReplayer final : public Replayer {
 public:
  RecordedReplayer(const Recording& rec, const std::vector<size_t>& lines) : rec_(rec), lines_(lines) {}
  ReplayBatches fetch(int64_t start) override {
    if (cursor_ >= lines_.size() || rec_.lines[lines_[cursor_]].from != start) {
      ++mismatches_;  // an edited or foreign recording: treat it as a request nobody answered
      return {};
    }
    return rec_.lines[lines_[cursor_++]].got;
  }
  // The playback reached replay line `index`: an answer still waiting was asked for by nobody.
  void passed(size_t index) {
    while (cursor_ < lines_.size() && lines_[cursor_] <= index) ++cursor_, ++mismatches_;
  }
  uint64_t mismatches() const { return mismatches_; }

 private:
  const Recording& rec_;
  const std::vector<size_t>& lines_;
  size_t cursor_ = 0;
  uint64_t mismatches_ = 0;
};

RecordingPlayback::RecordingPlayback(std::shared_ptr<const Recording> recording, double tick_s)
    : rec_(std::move(recording)), replay_lines_(rec_->instances.size()) {
  for (size_t k = 0; k < rec_->lines.size(); ++k)
    if (rec_->lines[k].kind == RecordedLine::Kind::Replay) replay_lines_.at(rec_->lines[k].instance).push_back(k);
  // The live attach ticks every 0.25 s; over a very long recording fewer ticks make the same
  // bounded timeline (it keeps a few hundred buckets) without a seek costing millions of them.
  tick_s_ = std::max(tick_s > 0 ? tick_s : 0.25, (rec_->end() - rec_->started) / 20000);
  restart();
}

RecordingPlayback::~RecordingPlayback() = default;

void RecordingPlayback::restart() {
  streams_.clear();
  replayers_.clear();
  timelines_.clear();
  for (size_t i = 0; i < rec_->instances.size(); ++i) {
    replayers_.push_back(std::make_unique<RecordedReplayer>(*rec_, replay_lines_[i]));
    const bool has_replay = !rec_->instances[i].replay.empty();
    streams_.push_back(std::make_unique<InstanceStream>(has_replay ? replayers_.back().get() : nullptr));
  }
  for (auto& s : streams_) s->sync_from_replay();  // as ZmqAttach's constructor does
  next_ = 0;
  now_ = next_tick_ = rec_->started;
}

void RecordingPlayback::apply(const RecordedLine& l) {
  if (l.kind == RecordedLine::Kind::Message)
    streams_[l.instance]->on_message(l.frames, l.t);
  else
    replayers_[l.instance]->passed(&l - rec_->lines.data());
}

void RecordingPlayback::seek(double time) {
  time = std::clamp(time, rec_->started, rec_->end());
  if (time < now_) restart();
  const auto& lines = rec_->lines;
  while (true) {
    const double line_t = next_ < lines.size() ? lines[next_].t : std::numeric_limits<double>::infinity();
    if (next_tick_ <= time && next_tick_ < line_t) {  // a tick sees every line up to its time
      tick_timelines(timelines_, *this, {}, next_tick_);
      next_tick_ += tick_s_;
    } else if (line_t <= time) {
      apply(lines[next_++]);
    } else {
      break;
    }
  }
  now_ = time;
}

uint64_t RecordingPlayback::replay_mismatches() const {
  uint64_t n = 0;
  for (const auto& r : replayers_) n += r->mismatches();
  return n;
}

std::vector<InstanceTimeline> RecordingPlayback::timelines() const {
  std::vector<InstanceTimeline> t = timelines_;
  tick_timelines(t, *this, {}, now_);
  return t;
}

}  // namespace kvscope::attach
