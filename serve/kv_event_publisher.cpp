#include "serve/kv_event_publisher.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <stdexcept>

namespace kvscope::serve {

struct KvEventPublisher::Impl {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;
  std::deque<std::pair<int64_t, std::string>> buffer;  // (seq, payload) for replay
  int64_t next_seq = 0;
};

KvEventPublisher::KvEventPublisher(const std::string& endpoint, const std::string& replay, std::string topic,
                                   size_t buffer_batches)
    : impl_(std::make_unique<Impl>()), topic_(std::move(topic)), buffer_batches_(buffer_batches) {
  try {
    impl_->pub.set(zmq::sockopt::sndhwm, 100000);
    impl_->pub.set(zmq::sockopt::linger, 1000);
    impl_->pub.bind(endpoint);
    endpoint_ = impl_->pub.get(zmq::sockopt::last_endpoint);
    if (!replay.empty()) {
      impl_->replay = std::make_unique<zmq::socket_t>(impl_->ctx, zmq::socket_type::router);
      impl_->replay->set(zmq::sockopt::linger, 0);
      impl_->replay->bind(replay);
      replay_endpoint_ = impl_->replay->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("KV events: cannot bind " + (endpoint_.empty() ? endpoint : replay) + ": " + e.what());
  }
  thread_ = std::thread([this] { loop(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::publish(const KvEventBatch& b) {
  std::string payload = encode_kv_event_batch(b);
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(payload));
  }
  cv_.notify_one();
}

void KvEventPublisher::loop() {
  Impl& s = *impl_;
  for (;;) {
    std::deque<std::string> batch;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      // With a replay socket to watch, wake often; without one, wait for work.
      cv_.wait_for(lk, std::chrono::milliseconds(s.replay ? 20 : 200), [&] { return stop_ || !queue_.empty(); });
      batch.swap(queue_);
      stopping = stop_;
    }
    for (std::string& payload : batch) {
      const int64_t seq = s.next_seq++;
      const std::string seq_frame = encode_sequence_number(seq);
      try {
        s.pub.send(zmq::buffer(topic_), zmq::send_flags::sndmore);
        s.pub.send(zmq::buffer(seq_frame), zmq::send_flags::sndmore);
        s.pub.send(zmq::buffer(payload), zmq::send_flags::none);
      } catch (const zmq::error_t&) {
        // A PUB socket drops for slow subscribers rather than block; nothing to do here.
      }
      s.buffer.emplace_back(seq, std::move(payload));
      if (s.buffer.size() > buffer_batches_) s.buffer.pop_front();
    }
    if (s.replay) {
      // Requests: [identity, empty, 8-byte start seq]. Answers: [identity, empty, seq, payload]
      // for each buffered batch from there, then [identity, empty, -1, ""].
      for (;;) {
        std::vector<zmq::message_t> req;
        try {
          if (!zmq::recv_multipart(*s.replay, std::back_inserter(req), zmq::recv_flags::dontwait)) break;
        } catch (const zmq::error_t&) { break; }
        if (req.size() != 3 || req[2].size() != 8) continue;  // not a replay request: ignored, as vLLM does
        int64_t start = 0;
        try {
          start = decode_sequence_number(std::string_view(static_cast<const char*>(req[2].data()), 8));
        } catch (const std::exception&) { continue; }
        const std::string id(static_cast<const char*>(req[0].data()), req[0].size());
        auto send = [&](const std::string& seq_frame, const std::string& payload) {
          try {
            s.replay->send(zmq::buffer(id), zmq::send_flags::sndmore);
            s.replay->send(zmq::buffer(std::string()), zmq::send_flags::sndmore);
            s.replay->send(zmq::buffer(seq_frame), zmq::send_flags::sndmore);
            s.replay->send(zmq::buffer(payload), zmq::send_flags::none);
          } catch (const zmq::error_t&) {}
        };
        for (const auto& [seq, payload] : s.buffer)
          if (seq >= start) send(encode_sequence_number(seq), payload);
        send(encode_sequence_number(-1), "");
      }
    }
    if (stopping) {
      std::lock_guard<std::mutex> lk(mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace kvscope::serve
