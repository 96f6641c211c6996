#pragma once
#include <cstdint>

namespace kvscope {

struct SamplingParams {
  float temperature = 0.0f;       // 0: greedy (argmax, lowest id wins ties, as llama.cpp)
  int32_t top_k = 0;              // 0: off
  float top_p = 1.0f;             // 1: off
  float min_p = 0.0f;             // 0: off
  float repetition_penalty = 1.0f;  // 1: off (llama.cpp semantics: divide positive logits, multiply negative)
  int32_t repetition_last_n = 64;
  uint64_t seed = 0;              // per request; same seed, same output
};

}  // namespace kvscope
