#pragma once
// The sockets of an attach: one SUB per instance (connected to the engine's PUB, which binds),
// and per replay request a fresh DEALER on the engine's ROUTER replay socket. Reconnects are
// ZeroMQ's: a publisher that vanishes and comes back is picked up again (its sequence starting
// over is InstanceStream's restart).
#include <memory>
#include <string>
#include <vector>

#include "attach/instance_stream.h"

namespace kvscope::attach {

struct InstanceSpec {
  std::string endpoint;  // tcp://HOST:PORT (or ipc://, inproc://)
  std::string replay;    // the replay ROUTER's address, "" when there is none
  std::string topic;     // the SUB's prefix filter ("" = everything)
  int dp_rank = 0;       // which data-parallel rank of its --endpoint this is
  int source = 0;        // index of the --endpoint it was expanded from (pairs it with --metrics)
};

// vLLM (and SGLang) publish data-parallel rank r on base port + r, the replay socket too;
// inproc addresses get vLLM's "_dp<r>" suffix. Throws std::invalid_argument on a bad address.
std::vector<InstanceSpec> expand_dp_ranks(const InstanceSpec& base, int ranks);

class ZmqAttach {
 public:
  // replay_timeout_ms bounds one replay request (the engine may not answer). Throws
  // std::invalid_argument for an address ZeroMQ cannot connect to.
  explicit ZmqAttach(std::vector<InstanceSpec> specs, int replay_timeout_ms = 3000);
  ~ZmqAttach();
  void poll_for(int ms);  // receives and applies what arrives within ms
  size_t size() const { return specs_.size(); }
  const InstanceSpec& spec(size_t i) const { return specs_.at(i); }
  const InstanceStream& stream(size_t i) const;

 private:
  struct Impl;
  std::vector<InstanceSpec> specs_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvscope::attach
