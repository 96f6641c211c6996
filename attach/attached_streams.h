#pragma once
// What the report, the timelines and the window read of an attach, whichever way its streams
// were fed: live from ZMQ sockets (ZmqAttach) or from a recording (RecordingPlayback). One
// interface, so a recording is shown and reported by the very code that shows a live attach.
#include <cstddef>
#include <string>

#include "attach/instance_stream.h"

namespace kvscope::attach {

struct InstanceSpec {
  std::string endpoint;  // tcp://HOST:PORT (or ipc://, inproc://)
  std::string replay;    // the replay ROUTER's address, "" when there is none
  std::string topic;     // the SUB's prefix filter ("" = everything)
  int dp_rank = 0;       // which data-parallel rank of its --endpoint this is
  int source = 0;        // index of the --endpoint it was expanded from (pairs it with --metrics)
};

class AttachedStreams {
 public:
  virtual ~AttachedStreams() = default;
  virtual size_t size() const = 0;
  virtual const InstanceSpec& spec(size_t i) const = 0;
  virtual const InstanceStream& stream(size_t i) const = 0;
};

}  // namespace kvscope::attach
