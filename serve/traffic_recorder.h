#pragma once
// `serve --record FILE`: kvscope's own traffic as a trace `kvscope-cli replay --format kvscope`
// reads (run/trace_reader.h), so a local session can be replayed at any size. One line per
// sequence (an n > 1 request gives n lines with one arrival): arrival in ms since the server
// started, prompt and generated token counts, the prompt's full blocks as a chain of hash ids
// at the engine's block size, and the request's `user` as its session.
//
// Lines must be in arrival order, but sequences end in any order: a finished sequence waits
// until every earlier arrival has ended, then its line (and those after it that are ready) is
// written and flushed. Engine thread only.
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kv/kv_types.h"

namespace kvscope::serve {

class TrafficRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  // Throws std::runtime_error when the file cannot be written.
  TrafficRecorder(const std::string& path, int32_t block_size);
  ~TrafficRecorder();  // writes whatever is still held, in order

  void started(SeqId id, Clock::time_point arrival);
  // A sequence that never ran (refused) is dropped: it asked nothing of the cache.
  void finished(SeqId id, std::span<const TokenId> prompt, int32_t output_tokens, const std::string& session, bool ran);
  int64_t lines_written() const { return written_; }

  // The prompt's full blocks as chained ids: id k names blocks 0..k (63-bit, non-negative).
  static std::vector<int64_t> hash_ids(std::span<const TokenId> prompt, int32_t block_size);

 private:
  void write_ready();

  std::ofstream out_;
  int32_t block_size_;
  Clock::time_point start_ = Clock::now();
  // (arrival ms, sequence) -> its line once finished ("" while running).
  std::map<std::pair<int64_t, SeqId>, std::string> held_;
  std::map<SeqId, int64_t> arrival_ms_;
  int64_t written_ = 0;
};

}  // namespace kvscope::serve
