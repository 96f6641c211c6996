#pragma once
// What the engine keeps of one request beside the scheduler's Sequence: its sampler, recorded
// logits, timings, and the parallel samples still to fork off. (Sequence is the scheduler's
// state, RequestRecord the engine's bookkeeping, SeqSnap what a snapshot shows of both.)
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <string>
#include <vector>

#include "chat/reasoning_parser.h"
#include "engine/sampler.h"
#include "engine/sequence.h"

namespace kvscope {

struct Request {
  std::vector<TokenId> prompt;  // BOS included as wanted
  int32_t max_new_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;
  // Extra tokens that end the reply like EOS (a chat template's end-of-turn); kept in the output.
  std::vector<TokenId> stop_tokens;
  bool record_logits = false;         // keep the logits of every sampling step (for --logits-out)
  bool record_prompt_logits = false;  // keep the logits after every prompt position (perplexity)
  // With record_prompt_logits: when set, each prompt row is handed here in order instead of being
  // kept (a 262K-token vocabulary makes a row 1 MiB: a long text's rows would not fit in memory).
  std::function<void(std::span<const float>)> on_prompt_logits;
  std::string label;
  // How the reply splits into reasoning and content (a chat turn of a reasoning model): the
  // request's story then says how many tokens and KV blocks the reasoning took.
  ReasoningSetup reasoning;
};

struct RequestRecord {
  using Clock = std::chrono::steady_clock;
  Sequence seq;
  std::string label;
  ReasoningSetup reasoning;
  std::unique_ptr<Sampler> sampler;
  bool record_logits = false;
  bool record_prompt_logits = false;
  std::function<void(std::span<const float>)> on_prompt_logits;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<float>> prompt_logits;
  int32_t pending_forks = 0;     // parallel samples still to fork off after the prompt
  std::vector<SeqId> child_ids;  // their ids, reserved at submit time
  Request fork_template;
  Clock::time_point submitted;
  Clock::time_point last_token;
  double ttft_ms = -1;
  double itl_sum_ms = 0;
  int32_t itl_count = 0;
  uint64_t finished_step = 0;  // for pruning old finished sequences
};

}  // namespace kvscope
