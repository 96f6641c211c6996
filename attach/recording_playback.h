#pragma once
// An attach rebuilt from its recording (attach/event_recording.h), at any time of it: every
// recorded message goes through InstanceStream::on_message with its recorded arrival time, and
// every replay request is answered by the recorded answer, so the streams, views and counters
// at time T are what the live attach had when its clock read T. Memory over time is ticked as
// the live attach ticks it (every 0.25 s from the start), without /metrics (not recorded).
// `kvscope-cli attach --play` and the window's scrubber both drive this.
#include <memory>
#include <vector>

#include "attach/attached_streams.h"
#include "attach/event_recording.h"
#include "attach/instance_timeline.h"

namespace kvscope::attach {

class RecordedReplayer;

class RecordingPlayback final : public AttachedStreams {
 public:
  explicit RecordingPlayback(std::shared_ptr<const Recording> recording, double tick_s = 0.25);
  ~RecordingPlayback() override;
  // Applies every line up to `time` (Unix s, clamped to the recording); an earlier time than
  // now starts over from the header (re-applying is fast: docs/attach.md has the rate).
  void seek(double time);
  double time() const { return now_; }
  double start() const { return rec_->started; }
  double end() const { return rec_->end(); }
  size_t lines_applied() const { return next_; }
  // Replay requests the recording had no matching answer for, and answers no request asked for
  // (zero for a recording kvscope wrote and nobody edited).
  uint64_t replay_mismatches() const;
  const Recording& recording() const { return *rec_; }

  size_t size() const override { return rec_->instances.size(); }
  const InstanceSpec& spec(size_t i) const override { return rec_->instances.at(i); }
  const InstanceStream& stream(size_t i) const override { return *streams_.at(i); }
  // Memory over time up to time(): the regular ticks, and one at time() as the live attach's last.
  std::vector<InstanceTimeline> timelines() const;

 private:
  void restart();
  void apply(const RecordedLine& l);
  std::shared_ptr<const Recording> rec_;
  double tick_s_;
  std::vector<std::vector<size_t>> replay_lines_;  // per instance: its replay lines, in order
  std::vector<std::unique_ptr<RecordedReplayer>> replayers_;
  std::vector<std::unique_ptr<InstanceStream>> streams_;
  std::vector<InstanceTimeline> timelines_;
  size_t next_ = 0;  // the next line to apply
  double now_ = 0, next_tick_ = 0;
};

}  // namespace kvscope::attach
