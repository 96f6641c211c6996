#pragma once
// What one OpenAI request asks the engine for, once parsed and checked (openai_request.h), and
// what flows back to the HTTP thread that waits for it (request_channel.h).
#include <chrono>
#include <string>
#include <vector>

#include "chat/reasoning_parser.h"
#include "types/sampling_params.h"
#include "kv/kv_types.h"

namespace kvscope::serve {

struct GenerationJob {
  std::vector<TokenId> prompt;  // BOS included as the model wants
  int32_t max_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<TokenId> stop_tokens;  // a chat template's end of turn
  std::vector<std::string> stop;     // stop strings: the text ends before the first match
  int n = 1;                         // parallel samples of the prompt (engine submit_parallel)
  int logprobs = -1;                 // -1: none; else how many top alternatives per token
  std::string session;               // the request's `user`, for serve --record
  ReasoningSetup reasoning;          // chat: how the reply splits into reasoning and content
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
};

struct TopLogprob {
  TokenId token = 0;
  std::string text;
  float logprob = 0;
};

// One thing the engine thread tells a request's HTTP thread.
struct ChannelItem {
  enum class Kind { Token, Finish } kind = Kind::Token;
  int index = 0;  // which of the n choices
  // Token: the sampled id, its text as far as it is complete UTF-8 and not held back by a
  // possible stop string (may be empty), and with logprobs its log-probability and top list.
  // A reasoning reply's markers are in the text even where they are control tokens (gpt-oss's
  // <|channel|>): the HTTP side splits the text into reasoning and content.
  TokenId token = 0;
  std::string text;
  std::string token_text;  // the token's own piece (for logprobs)
  float logprob = 0;
  std::vector<TopLogprob> top;
  // Finish: "stop", "length", "cancelled" or "error" (error set), with the counts for usage.
  std::string finish_reason;
  std::string error;
  int error_status = 0;  // an error the server caused (shutting down, engine rebuilt): 503
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
  int32_t reasoning_tokens = -1;  // tokens of the reply's reasoning (-1: not parsed)
};

}  // namespace kvscope::serve
