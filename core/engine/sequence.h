#pragma once
// One request's state as the scheduler and engine see it.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_types.h"
#include "types/sampling_params.h"
#include "types/seq_state.h"

namespace kvscope {

struct Sequence {
  SeqId id = 0;
  // The one token list: the prompt as fed (BOS included), then every generated id. The KV cache
  // holds a prefix of it; the batch, the sampler and the allocator read it in place.
  std::vector<TokenId> tokens;
  int32_t prompt_len = 0;
  int32_t max_new_tokens = 16;
  bool ignore_eos = false;
  std::vector<TokenId> stop_tokens;  // also end the sequence (FinishReason::Eos) unless ignore_eos
  SamplingParams sampling;
  SeqState state = SeqState::Waiting;
  FinishReason finish = FinishReason::None;
  std::string error;              // why it was rejected
  int32_t num_computed = 0;       // tokens whose K/V are in the cache (prefix hits included)
  int32_t num_cached_prompt = 0;  // prompt tokens reused from the prefix cache at (last) admission
  int32_t preemptions = 0;
  int64_t arrival_step = 0;
  uint64_t arrival_order = 0;  // FCFS tie-break

  void set_prompt(std::vector<TokenId> p) {
    tokens = std::move(p);
    prompt_len = static_cast<int32_t>(tokens.size());
  }
  std::span<const TokenId> prompt() const { return {tokens.data(), static_cast<size_t>(prompt_len)}; }
  std::span<const TokenId> output() const {
    return std::span<const TokenId>(tokens).subspan(static_cast<size_t>(prompt_len));
  }
  // Copies, for callers that keep or compare them.
  std::vector<TokenId> prompt_tokens() const { return {tokens.begin(), tokens.begin() + prompt_len}; }
  std::vector<TokenId> output_tokens() const { return {tokens.begin() + prompt_len, tokens.end()}; }
  int32_t num_generated() const { return total_len() - prompt_len; }
  int32_t total_len() const { return static_cast<int32_t>(tokens.size()); }
  bool is_finished() const { return is_final_state(state); }
};

}  // namespace kvscope
