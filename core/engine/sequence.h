#pragma once
// One request's state as the scheduler and engine see it.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "kv/kv_types.h"

namespace kvscope {

enum class SeqState { Waiting, Running, Preempted, Finished, Cancelled, Rejected };
const char* seq_state_name(SeqState s);

enum class FinishReason { None, Length, Eos, Cancelled, Rejected };

struct Sequence {
  SeqId id = 0;
  std::vector<TokenId> prompt;     // as fed, BOS included
  std::vector<TokenId> output;     // generated ids
  int32_t max_new_tokens = 16;
  bool ignore_eos = false;
  std::vector<TokenId> stop_tokens;  // also end the sequence (FinishReason::Eos) unless ignore_eos
  SamplingParams sampling;
  SeqState state = SeqState::Waiting;
  FinishReason finish = FinishReason::None;
  std::string error;               // why it was rejected
  int32_t num_computed = 0;        // tokens whose K/V are in the cache (prefix hits included)
  int32_t num_cached_prompt = 0;   // prompt tokens reused from the prefix cache at (last) admission
  int32_t preemptions = 0;
  int64_t arrival_step = 0;
  uint64_t arrival_order = 0;      // FCFS tie-break

  int32_t total_len() const { return static_cast<int32_t>(prompt.size() + output.size()); }
  // All token ids (prompt then output): the sequence the KV cache must hold.
  std::vector<TokenId> all_tokens() const;
  bool is_finished() const {
    return state == SeqState::Finished || state == SeqState::Cancelled || state == SeqState::Rejected;
  }
};

}  // namespace kvscope
