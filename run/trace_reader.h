#pragma once
// Request traces for `kvscope-cli replay` (run/trace_replay.h): one JSON object per line, read
// and checked one line at a time so that every problem names its line. Two schemas:
//   mooncake (Mooncake's FAST'25 release): timestamp, input_length, output_length, hash_ids;
//            the hash ids are 512-token blocks.
//   kvscope: timestamp_ms, input_length, output_length, hash_ids, block_size (the tokens each
//            hash id stands for), session_id (optional string).
// A hash id names a block's contents together with everything before it (a chain), so equal ids
// at equal positions are a shared prefix. docs/replay.md has the full schema.
#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

enum class TraceFormat { Mooncake, Kvscope };

// "mooncake" or "kvscope"; throws std::invalid_argument otherwise.
TraceFormat parse_trace_format(const std::string& name);

constexpr int32_t kMooncakeBlockTokens = 512;

struct TraceRequest {
  int64_t timestamp_ms = 0;
  int32_t input_length = 0;   // prompt tokens
  int32_t output_length = 0;  // generated tokens (not replayed in stage 1: their ids are unknown)
  std::vector<int64_t> hash_ids;
  int32_t block_size = kMooncakeBlockTokens;  // tokens per hash id
  std::string session_id;
  int64_t line = 0;  // 1-based line of the trace file
};

// A bad line: what() reads "line N: why".
struct TraceError : std::runtime_error {
  TraceError(int64_t line, const std::string& why);
  int64_t line;
  std::string why;
};

// One line's request, checked on its own (lengths, chain length); throws std::invalid_argument.
TraceRequest parse_trace_line(std::string_view text, TraceFormat format);

struct TraceReaderOptions {
  TraceFormat format = TraceFormat::Mooncake;
  int64_t max_line_bytes = 1 << 20;  // a longer line is bad (and never held in memory whole)
  bool skip_bad = false;             // count bad lines instead of stopping at the first
};

class TraceReader {
 public:
  TraceReader(std::istream& in, TraceReaderOptions options);
  // The next good request, false at the end. A bad line throws TraceError, or is counted and
  // passed over with skip_bad. Blank lines are ignored.
  bool next(TraceRequest& out);
  int64_t skipped_lines() const { return skipped_; }
  // The first few skipped lines' errors, for the report.
  const std::vector<std::string>& skipped_errors() const { return skipped_errors_; }

 private:
  enum class Line { Ok, End, TooLong };
  Line read_line();
  void check_order(const TraceRequest& r) const;
  bool reject(const std::string& why);  // throws, or counts and returns true

  std::istream& in_;
  TraceReaderOptions opt_;
  std::vector<char> buf_;
  std::string_view text_;
  int64_t line_ = 0;
  int64_t skipped_ = 0;
  int64_t last_timestamp_ = -1;  // of the last good line: timestamps must not go back
  std::vector<std::string> skipped_errors_;
};

// Every good request of a stream (see TraceReader).
std::vector<TraceRequest> read_trace(std::istream& in, const TraceReaderOptions& options, int64_t* skipped = nullptr,
                                     std::vector<std::string>* skipped_errors = nullptr);

}  // namespace kvscope
