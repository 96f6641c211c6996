#pragma once
// Publishes KV event batches the way vLLM's ZmqEventPublisher does: a PUB socket sending
// (topic, 8-byte big-endian sequence number, msgpack KVEventBatch), and optionally a ROUTER
// replay socket that answers a start sequence number with every buffered batch from there on,
// then the end marker (sequence -1, empty payload). Its own thread owns both sockets; publish()
// only queues, so the engine thread never waits on the network. Binds (vLLM connects when the
// address has no wildcard; a server publishing its own cache binds, so subscribers connect).
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "serve/kv_events_codec.h"

namespace kvscope::serve {

class KvEventPublisher {
 public:
  // Throws std::runtime_error when an endpoint cannot be bound. replay may be empty.
  KvEventPublisher(const std::string& endpoint, const std::string& replay, std::string topic,
                   size_t buffer_batches = 10000);
  ~KvEventPublisher();                                       // sends what is queued, then closes
  void publish(const KvEventBatch& b);                       // any thread
  const std::string& endpoint() const { return endpoint_; }  // as bound (tcp://127.0.0.1:* resolved)
  const std::string& replay_endpoint() const { return replay_endpoint_; }

 private:
  struct Impl;
  void loop();
  std::unique_ptr<Impl> impl_;
  std::string endpoint_, replay_endpoint_, topic_;
  size_t buffer_batches_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;  // encoded payloads
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvscope::serve
