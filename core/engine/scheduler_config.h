#pragma once
#include <cstdint>

namespace kvscope {

struct SchedulerConfig {
  int32_t max_running = 64;          // max sequences in one step
  int32_t max_batched_tokens = 512;  // token budget per step (chunked prefill)
  int32_t max_model_len = 2048;      // a sequence may never exceed this many tokens
  // The no-KV-cache teaching mode as a scheduling policy: after every sampled token a
  // sequence's K/V are forgotten (its slots freed) and the next step recomputes all of it.
  bool recompute_every_token = false;
};

}  // namespace kvscope
