#include "attach/instance_stream.h"

#include <algorithm>
#include <map>

namespace kvscope::attach {

std::string printable_bytes(const std::string& s) {
  // Topics are bytes on the wire; JSON and the window need text, so no byte is passed through
  // that could make invalid UTF-8.
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\')
      out += static_cast<char>(c);
    else
      out += "\\x", out += hex[c >> 4], out += hex[c & 15];
  }
  return out;
}

void InstanceStream::on_message(const std::vector<std::string>& frames, double now) {
  ++c_.messages;
  if (!first_arrival_) first_arrival_ = now;
  last_arrival_ = now;
  if (frames.size() != 3 || frames[1].size() != 8) {
    ++c_.bad_frames;
    last_error_ =
        "a message of " + std::to_string(frames.size()) + " frames (topic, 8-byte sequence, payload expected)";
    return;
  }
  topic_ = printable_bytes(frames[0]);
  const int64_t seq = kv_events::decode_sequence_number(frames[1]);
  if (seq < 0) {  // -1 is the replay's end marker; on the live stream no sequence is negative
    ++c_.bad_frames;
    last_error_ = "a negative sequence number on the live stream";
    return;
  }
  if (last_seq_ && (seq == *last_seq_ || (catching_up_ && seq < *last_seq_))) {
    ++c_.duplicates;
    return;
  }
  catching_up_ = false;
  if (last_seq_ && seq < *last_seq_) {
    // Sequence numbers only go back when the publisher starts over (vLLM counts from 0 in a
    // new engine process): what we knew of its cache is gone with it.
    ++c_.restarts;
    view_.clear();
    last_seq_.reset();
  }
  // Here seq > *last_seq_ (or there is none), so last + 1 cannot overflow.
  const int64_t expected = last_seq_ ? *last_seq_ + 1 : 0;
  if (seq > expected) {
    ++c_.gaps;
    recover(expected, seq);
  }
  apply_payload(frames[2], now);
  last_seq_ = seq;
}

void InstanceStream::sync_from_replay() {
  if (!replayer_) return;
  ++c_.replay_requests;
  const auto fetched = replayer_->fetch(0);
  if (fetched.empty()) return;
  // The buffer is consecutive from its oldest batch; what came before it is gone for good.
  c_.lost_batches += static_cast<uint64_t>(std::max<int64_t>(0, fetched.front().first));
  for (const auto& [s, p] : fetched) {
    if (last_seq_ && s <= *last_seq_) continue;
    if (last_seq_ && s > *last_seq_ + 1) c_.lost_batches += static_cast<uint64_t>(s - *last_seq_ - 1);
    apply_payload(p, 0);
    ++c_.replayed;
    last_seq_ = s;
  }
  catching_up_ = true;
}

void InstanceStream::recover(int64_t from, int64_t to) {
  std::map<int64_t, const std::string*> got;
  std::vector<std::pair<int64_t, std::string>> fetched;
  if (replayer_) {
    ++c_.replay_requests;
    fetched = replayer_->fetch(from);
    for (const auto& [s, p] : fetched)
      if (s >= from && s < to) got.emplace(s, &p);  // later ones arrive live
  }
  for (const auto& [s, p] : got) apply_payload(*p, 0);
  c_.replayed += got.size();
  c_.lost_batches += static_cast<uint64_t>(to - from) - got.size();
}

void InstanceStream::apply_payload(const std::string& payload, double now) {
  kv_events::KvEventBatch b;
  try {
    b = kv_events::decode_kv_event_batch(payload, &c_.ignored);
  } catch (const kv_events::KvEventDecodeError& e) {
    ++c_.undecodable;
    last_error_ = e.what();
    return;
  }
  ++c_.batches;
  if (b.data_parallel_rank) rank_ = b.data_parallel_rank;
  if (now > 0) {
    if (now - b.ts > max_lag_) max_lag_ = now - b.ts;
    c_.live_events += b.events.size();
    ++c_.lag_samples;
    c_.lag_sum_s += now - b.ts;
  }
  view_.apply(b);
}

}  // namespace kvscope::attach
