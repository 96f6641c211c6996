#include "attach/zmq_subscriber.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "attach/event_recording.h"

namespace kvscope::attach {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string offset_port(const std::string& ep, int r) {
  if (ep.empty() || r == 0) return ep;
  if (ep.rfind("inproc://", 0) == 0) return ep + "_dp" + std::to_string(r);
  const size_t colon = ep.rfind(':');
  if (ep.rfind("tcp://", 0) != 0 || colon == std::string::npos || colon < 6)
    throw std::invalid_argument("cannot offset the port of '" + ep +
                                "' by a data-parallel rank (tcp://HOST:PORT expected)");
  size_t used = 0;
  int port = 0;
  try {
    port = std::stoi(ep.substr(colon + 1), &used);
  } catch (const std::exception&) { used = 0; }
  if (used == 0 || used != ep.size() - colon - 1 || port <= 0 || port + r > 65535)
    throw std::invalid_argument("'" + ep + "' has no port to offset by a data-parallel rank");
  return ep.substr(0, colon + 1) + std::to_string(port + r);
}

// One replay request on a fresh DEALER (a stale answer to an earlier, timed-out request can
// then never be mistaken for this one). `answered` sees every answer (the recording's).
class ZmqReplayer final : public Replayer {
 public:
  using Answered = std::function<void(int64_t start, const ReplayBatches& got)>;
  ZmqReplayer(zmq::context_t& ctx, std::string endpoint, int timeout_ms, Answered answered)
      : ctx_(ctx), endpoint_(std::move(endpoint)), timeout_ms_(timeout_ms), answered_(std::move(answered)) {}
  ReplayBatches fetch(int64_t start) override {
    ReplayBatches got = ask(start);
    if (answered_) answered_(start, got);
    return got;
  }

 private:
  ReplayBatches ask(int64_t start);
  zmq::context_t& ctx_;
  std::string endpoint_;
  int timeout_ms_;
  Answered answered_;
};

ReplayBatches ZmqReplayer::ask(int64_t start) {
  std::vector<std::pair<int64_t, std::string>> out;
  zmq::socket_t dealer(ctx_, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint_);
  // The ROUTER sees [identity, "", start]: a DEALER sends the empty delimiter itself.
  const std::string start_frame = kv_events::encode_sequence_number(start);  // alive until sent
  std::vector<zmq::const_buffer> req = {zmq::buffer(std::string_view()), zmq::buffer(start_frame)};
  if (!zmq::send_multipart(dealer, req, zmq::send_flags::dontwait)) return out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    if (left <= 0 || zmq::poll(&item, 1, std::chrono::milliseconds(left)) <= 0) break;
    std::vector<zmq::message_t> msg;
    if (!zmq::recv_multipart(dealer, std::back_inserter(msg))) break;
    // vLLM 0.10 answers ["", seq, payload]; vLLM >= 0.11 and SGLang ["", topic, seq, payload]
    // and the end marker ["", "", -1, ""]: drop leading empty frames down to [seq, payload].
    size_t first = 0;
    while (msg.size() - first > 2 && msg[first].size() == 0) ++first;
    if (msg.size() - first == 3) ++first;  // the topic
    if (msg.size() - first != 2 || msg[first].size() != 8) continue;
    const int64_t seq = kv_events::decode_sequence_number(msg[first].to_string_view());
    if (seq == -1) break;
    out.emplace_back(seq, msg[first + 1].to_string());
  }
  return out;
}

}  // namespace

std::vector<InstanceSpec> expand_dp_ranks(const InstanceSpec& base, int ranks) {
  if (ranks < 1 || ranks > 1024) throw std::invalid_argument("--dp-ranks must be 1..1024");
  std::vector<InstanceSpec> out;
  for (int r = 0; r < ranks; ++r) {
    InstanceSpec s = base;
    s.endpoint = offset_port(base.endpoint, r);
    s.replay = offset_port(base.replay, r);
    s.dp_rank = r;
    out.push_back(std::move(s));
  }
  return out;
}

struct ZmqAttach::Impl {
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<zmq::socket_t>> subs;
  std::vector<std::unique_ptr<ZmqReplayer>> replayers;
  std::vector<std::unique_ptr<InstanceStream>> streams;
  EventRecorder* recorder = nullptr;
  double last_arrival = 0;
};

double ZmqAttach::arrival_now() {
  // A recording's times never go back, and playback must see the times this attach applied.
  impl_->last_arrival = std::max(impl_->last_arrival, now_s());
  return impl_->last_arrival;
}

ZmqAttach::ZmqAttach(std::vector<InstanceSpec> specs, int replay_timeout_ms, EventRecorder* recorder)
    : specs_(std::move(specs)), impl_(std::make_unique<Impl>()) {
  impl_->recorder = recorder;
  const double started = arrival_now();
  if (recorder) recorder->begin(specs_, started);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const InstanceSpec& s = specs_[i];
    auto sub = std::make_unique<zmq::socket_t>(impl_->ctx, zmq::socket_type::sub);
    sub->set(zmq::sockopt::linger, 0);
    sub->set(zmq::sockopt::rcvhwm, 1000000);
    sub->set(zmq::sockopt::subscribe, s.topic);
    try {
      sub->connect(s.endpoint);
    } catch (const zmq::error_t& e) {
      throw std::invalid_argument("cannot subscribe to '" + s.endpoint + "': " + e.what());
    }
    ZmqReplayer::Answered answered;
    if (recorder)
      answered = [this, i](int64_t start, const ReplayBatches& got) {
        impl_->recorder->replay(i, start, got, arrival_now());
      };
    impl_->replayers.push_back(
        s.replay.empty() ? nullptr
                         : std::make_unique<ZmqReplayer>(impl_->ctx, s.replay, replay_timeout_ms, std::move(answered)));
    impl_->streams.push_back(std::make_unique<InstanceStream>(impl_->replayers.back().get()));
    impl_->subs.push_back(std::move(sub));
  }
  // The SUBs are connected (ZeroMQ queues what they receive from here on): now the history.
  for (auto& st : impl_->streams) st->sync_from_replay();
}

ZmqAttach::~ZmqAttach() = default;

const InstanceStream& ZmqAttach::stream(size_t i) const { return *impl_->streams.at(i); }

void ZmqAttach::poll_for(int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  std::vector<zmq::pollitem_t> items;
  for (auto& s : impl_->subs) items.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0 || zmq::poll(items, std::chrono::milliseconds(left)) <= 0) break;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      // Drain what is queued on this socket so one busy instance cannot starve the others' order.
      for (int k = 0; k < 1000; ++k) {
        std::vector<zmq::message_t> msg;
        if (!zmq::recv_multipart(*impl_->subs[i], std::back_inserter(msg), zmq::recv_flags::dontwait)) break;
        std::vector<std::string> frames;
        for (auto& m : msg) frames.push_back(m.to_string());
        const double t = arrival_now();
        // Written before it is applied: a replay request it causes is the line after it.
        if (impl_->recorder) impl_->recorder->message(i, frames, t);
        impl_->streams[i]->on_message(frames, t);
      }
    }
  }
  if (impl_->recorder) impl_->recorder->flush();  // a killed attach loses at most one poll's worth
}

}  // namespace kvscope::attach
