#pragma once
// Turns the engine's prefix cache into vLLM KV events, on the engine thread after every step:
// a block whose hash enters the cache -> BlockStored (its hash, its parent's, its tokens), a hash
// that leaves it (evicted, or un-hashed with an evicted ancestor) -> BlockRemoved. vLLM reports
// a block when it is hashed, not when it is later released, so the tracker compares each
// block's hash with the previous step's rather than following the Cached/Evicted block events
// (a block that fills up and gets hashed is not a block event). Cost: one pass over the pool(s)
// per step, only when a KV event endpoint is configured.
#include <vector>

#include "engine/engine.h"
#include "serve/kv_events_codec.h"

namespace kvscope::serve {

class KvEventTracker {
 public:
  explicit KvEventTracker(const Engine& e);
  // The events since the previous call (removals first, then stores with parents before
  // children). Empty for the contiguous baseline, which has no prefix cache.
  std::vector<KvEvent> update(const Engine& e);

 private:
  struct Seen {
    bool hashed = false;
    BlockHash hash = 0;
  };
  std::vector<std::vector<Seen>> prev_;  // [KV group][block]
};

}  // namespace kvscope::serve
