#pragma once
// The sockets of an attach: one SUB per instance (connected to the engine's PUB, which binds),
// and per replay request a fresh DEALER on the engine's ROUTER replay socket. Reconnects are
// ZeroMQ's: a publisher that vanishes and comes back is picked up again (its sequence starting
// over is InstanceStream's restart). With an EventRecorder, every message and every replay
// answer is also written to a recording (attach/event_recording.h).
#include <memory>
#include <string>
#include <vector>

#include "attach/attached_streams.h"
#include "attach/instance_stream.h"

namespace kvscope::attach {

class EventRecorder;

// vLLM (and SGLang) publish data-parallel rank r on base port + r, the replay socket too;
// inproc addresses get vLLM's "_dp<r>" suffix. Throws std::invalid_argument on a bad address.
std::vector<InstanceSpec> expand_dp_ranks(const InstanceSpec& base, int ranks);

class ZmqAttach final : public AttachedStreams {
 public:
  // replay_timeout_ms bounds one replay request (the engine may not answer). Throws
  // std::invalid_argument for an address ZeroMQ cannot connect to. A recorder (which must
  // outlive this) gets the header now, then every message and replay answer as it arrives.
  explicit ZmqAttach(std::vector<InstanceSpec> specs, int replay_timeout_ms = 3000, EventRecorder* recorder = nullptr);
  ~ZmqAttach() override;
  void poll_for(int ms);  // receives and applies what arrives within ms
  size_t size() const override { return specs_.size(); }
  const InstanceSpec& spec(size_t i) const override { return specs_.at(i); }
  const InstanceStream& stream(size_t i) const override;

 private:
  double arrival_now();  // Unix seconds, never earlier than the last arrival (a clock step back)
  struct Impl;
  std::vector<InstanceSpec> specs_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvscope::attach
