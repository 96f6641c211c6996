#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace kvscope {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax, lowest id wins ties, as llama.cpp)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off (llama.cpp semantics: divide positive logits, multiply negative)
  int32_t repetition_last_n = 64;
  uint64_t seed = 0;  // per request; same seed, same output
  // Added to the logits of these token ids before anything else (OpenAI's logit_bias: -100 bans
  // a token, +100 all but forces it). Also what lets a test make a random-weight model write
  // chosen tokens, such as a reasoning model's </think>.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// What new chats start with, as local-chat users know it (Ollama: temperature 0.8, top-k 40,
// top-p 0.9, repeat penalty 1.1; LM Studio: 0.8 / 40 / 0.95 / 1.1): greedy decoding makes a
// small base model loop ("He was very smart. He was very smart. ..."), these settings do not.
// Greedy (SamplingParams{}) stays one click away for runs that must be reproducible.
inline SamplingParams chat_sampling_defaults() {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.1f;
  return p;
}
inline bool is_greedy(const SamplingParams& p) { return p.temperature <= 0.0f; }

}  // namespace kvscope
