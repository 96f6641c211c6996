#pragma once
// `kvscope-cli attach --record FILE`: the wire of an attach as it arrived, so that a recording
// replays through the very decoding path a live attach takes (InstanceStream::on_message).
// JSON lines; binary frames in base64 (standard alphabet, padded):
//   {"kvscope_attach_recording":1,"started":T0,"instances":[{"endpoint":..,"replay":..,
//    "topic":..,"dp_rank":0,"source":0},...]}                              the header, line 1
//   {"t":T,"i":I,"msg":[TOPIC,SEQ,PAYLOAD]}     one ZMQ message as received by instance I
//   {"t":T,"i":I,"replay":{"from":S,"got":[[SEQ,PAYLOAD],...]}}   one replay socket answer
// T is the arrival time in Unix seconds (never going back: the attach's clock does not); a
// replay line answers the request its instance made while handling the line before it (or,
// before any message, the late attach's history request). An empty "got" is a request that
// was not answered in time.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <istream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attach/attached_streams.h"

namespace kvscope::attach {

inline constexpr int kRecordingVersion = 1;
using ReplayBatches = std::vector<std::pair<int64_t, std::string>>;  // (seq, payload), as Replayer::fetch

std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);  // none: not strict padded base64

// Writes a recording; flush() is called by the attach loop a few times a second, so a killed
// attach loses at most the last fraction of a second (and the reader skips a cut-off last line).
class EventRecorder {
 public:
  explicit EventRecorder(const std::string& path);  // throws std::runtime_error
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;
  void begin(const std::vector<InstanceSpec>& instances, double started);
  void message(size_t instance, const std::vector<std::string>& frames, double t);
  void replay(size_t instance, int64_t from, const ReplayBatches& got, double t);
  void flush();  // throws std::runtime_error when the disk refused what was written
  uint64_t lines() const { return lines_; }

 private:
  void write_line(const std::string& line);
  std::FILE* f_ = nullptr;
  std::string path_;
  double last_t_ = 0;
  uint64_t lines_ = 0;
  bool failed_ = false;
};

struct RecordedLine {
  enum class Kind { Message, Replay };
  Kind kind = Kind::Message;
  size_t line = 0;  // 1-based line number in the file
  double t = 0;
  uint32_t instance = 0;
  std::vector<std::string> frames;  // Message
  int64_t from = 0;                 // Replay: the requested start, and the answer
  ReplayBatches got;
};

struct Recording {
  double started = 0;
  std::vector<InstanceSpec> instances;
  std::vector<RecordedLine> lines;  // in file order (so in time order)
  bool cut_off = false;             // the last line had no newline and did not parse: a killed attach; skipped
  double end() const { return lines.empty() ? started : lines.back().t; }
};

// What a reader accepts; beyond it the file is refused, not read on.
struct RecordingLimits {
  size_t max_line_bytes = size_t(64) << 20;  // one base64 message or replay answer
  uint64_t max_file_bytes = uint64_t(4) << 30;
  size_t max_instances = 4096;
  size_t max_frames = 1024;        // per message (the writer keeps at most this many)
  double max_span_s = 31 * 86400;  // from the header's start to the last line
  int max_depth = 6;               // JSON nesting (the format needs 4)
};

// "line N: what is wrong" (line 0: the file itself, e.g. it cannot be opened); the reader stops
// at the first one.
class RecordingError : public std::runtime_error {
 public:
  RecordingError(size_t line, const std::string& what)
      : std::runtime_error(line ? "line " + std::to_string(line) + ": " + what : what), line_(line) {}
  size_t line() const { return line_; }

 private:
  size_t line_;
};

// progress(bytes read so far) may return false to stop (throws RecordingError "cancelled").
using RecordingProgress = std::function<bool(uint64_t)>;
Recording read_recording(std::istream& in, const RecordingLimits& limits = {},
                         const RecordingProgress& progress = nullptr);
Recording read_recording_file(const std::string& path, const RecordingLimits& limits = {},
                              const RecordingProgress& progress = nullptr);  // line 0: cannot open

}  // namespace kvscope::attach
