#pragma once
// One instance's event stream, without sockets: checks sequence numbers, asks a Replayer for
// what a gap lost, decodes every batch of any generation and applies it to the CacheView,
// counting everything it could not use. The ZMQ side is zmq_subscriber.h.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attach/cache_view.h"

namespace kvscope::attach {

// Fetches buffered batches from the publisher's replay socket: every (seq, payload) from
// `start` on, in order, up to the end marker. Empty when the socket does not answer in time.
class Replayer {
 public:
  virtual ~Replayer() = default;
  virtual std::vector<std::pair<int64_t, std::string>> fetch(int64_t start) = 0;
};

struct StreamCounters {
  uint64_t messages = 0;  // live messages received
  uint64_t batches = 0;   // batches decoded and applied (live and replayed)
  uint64_t gaps = 0;      // discontinuities in the sequence (a late join included)
  uint64_t replay_requests = 0;
  uint64_t replayed = 0;      // batches recovered through the replay socket
  uint64_t lost_batches = 0;  // batches neither received nor replayed
  uint64_t bad_frames = 0;    // a message without 3 frames or an 8-byte sequence number
  uint64_t undecodable = 0;   // payloads the codec rejected (the error is in last_error)
  uint64_t restarts = 0;      // the sequence went back: the publisher (engine) restarted
  uint64_t duplicates = 0;
  uint64_t live_events = 0;          // KV events in batches that arrived live (replayed ones excluded)
  uint64_t lag_samples = 0;          // live batches with an arrival time, and the sum of their lags:
  double lag_sum_s = 0;              // the mean lag over any interval is a difference of the two
  kv_events::KvDecodeStats ignored;  // unknown fields and event types
};

class InstanceStream {
 public:
  explicit InstanceStream(Replayer* replayer = nullptr) : replayer_(replayer) {}
  // Attaching to a running engine: everything its replay buffer still holds, from sequence 0
  // (batches older than the buffer are counted lost). Call once, after the SUB is connected,
  // so that what is published meanwhile is queued there; no-op without a replay socket.
  void sync_from_replay();
  // One live message as received from the SUB socket; `now` is the arrival time (Unix s).
  void on_message(const std::vector<std::string>& frames, double now);

  const CacheView& view() const { return view_; }
  const StreamCounters& counters() const { return c_; }
  // The view may be missing changes: batches were lost or could not be decoded.
  bool stale() const { return c_.lost_batches > 0 || c_.undecodable > 0; }
  std::optional<int64_t> last_seq() const { return last_seq_; }
  std::optional<int32_t> data_parallel_rank() const { return rank_; }
  const std::string& topic() const { return topic_; }  // printable: bytes outside ASCII as \xNN
  const std::string& last_error() const { return last_error_; }
  double max_lag_s() const { return max_lag_; }  // arrival minus batch timestamp
  double first_arrival() const { return first_arrival_; }
  double last_arrival() const { return last_arrival_; }

 private:
  void recover(int64_t from, int64_t to);  // fills [from, to) from the replay socket
  void apply_payload(const std::string& payload, double now);
  Replayer* replayer_;
  CacheView view_;
  StreamCounters c_;
  std::optional<int64_t> last_seq_;
  bool catching_up_ = false;  // after sync_from_replay: live messages it already covered are queued
  std::optional<int32_t> rank_;
  std::string topic_, last_error_;
  double max_lag_ = 0, first_arrival_ = 0, last_arrival_ = 0;
};

std::string printable_bytes(const std::string& s);  // ASCII kept, other bytes as \xNN

}  // namespace kvscope::attach
