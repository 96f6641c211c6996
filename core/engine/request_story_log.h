#pragma once
// The bounded history of request stories: every live request's plus the newest finished ones.
// Shared (shared_ptr) so that it can outlive an engine: the GUI hands it to the engine it
// rebuilds, and a later request's prefix lookup can then say that an earlier engine held the
// same tokens under another KV dtype (MissReason::SaltDiffers).
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/request_story.h"

namespace kvscope {

class RequestStoryLog {
 public:
  explicit RequestStoryLog(size_t max_finished = 512) : max_finished_(max_finished) {}
  uint64_t new_engine() { return ++engines_; }    // a serial for the next engine that writes here
  RequestStory& open(uint64_t engine, SeqId id);  // a new live story
  RequestStory* live(uint64_t engine, SeqId id);
  void close(uint64_t engine, SeqId id);  // finished: moves to the bounded history
  // The story of request id on engine (0: the newest engine that has one), live or kept.
  const RequestStory* find(SeqId id, uint64_t engine = 0) const;
  // Every kept story, oldest first (finished ones by finish order, then the live ones).
  std::vector<const RequestStory*> all() const;
  size_t max_finished() const { return max_finished_; }
  size_t dropped() const { return dropped_; }  // finished stories pushed out of the history

 private:
  using Key = std::pair<uint64_t, SeqId>;
  size_t max_finished_;
  uint64_t engines_ = 0;
  size_t dropped_ = 0;
  std::map<Key, RequestStory> live_;
  std::deque<RequestStory> finished_;
};

}  // namespace kvscope
