#pragma once
// The tokenizer-facing side of a workload: what a replayer (CLI `run`, the GUI runner, tests)
// needs to turn WorkloadRequests into engine prompts.
//
// Replaying a multi-turn conversation: submit turn 0 with workload_prompt_ids(); when turn t
// finishes, take its FULL token sequence (prompt + generated tokens, as the engine's sequence
// holds them) and submit turn t+1 with build_turn_prompt(previous_tokens, request, tokenizer),
// at the first step >= its arrival_step. The new prompt then starts with exactly the tokens whose
// K/V turn t computed, which is what lets prefix caching reuse them.
#include <cstdint>
#include <span>
#include <vector>

#include "model/tokenizer.h"
#include "workload/workload.h"

namespace kvscope {

// Token ids of a request's own prompt: the ids as given, or the text encoded with
// add_special=true (BOS as the vocabulary wants) and parse_special=false (a prompt that spells
// "<s>" means the characters). For a follow-up turn use build_turn_prompt instead.
// Throws std::runtime_error when a given id is outside the vocabulary.
std::vector<TokenId> workload_prompt_ids(const WorkloadRequest& r, const Tokenizer& tok);

// The tokens of a turn's NEW text alone, as appended to a conversation: no BOS, and separated
// from the previous word by one space (SentencePiece vocabularies add that "▁" themselves;
// byte-level BPE ones get a leading ' ').
std::vector<TokenId> turn_text_ids(const WorkloadRequest& r, const Tokenizer& tok);

// Turn t+1's prompt = previous turn's prompt + generated tokens, then the new text's tokens.
// A trailing end-of-generation token (EOS/EOT) of the previous turn is dropped: it closed that
// turn, and a model does not expect it in the middle of a context.
std::vector<TokenId> build_turn_prompt(std::span<const TokenId> previous_tokens, const WorkloadRequest& r,
                                       const Tokenizer& tok);

// Worst-case sizes of each request in token counts, in workload order. For a follow-up turn the
// previous turns are assumed to generate all of their max_tokens (as with ignore_eos).
struct RequestTokens {
  int32_t prompt = 0;     // tokens submitted
  int32_t max_total = 0;  // prompt + max_new_tokens: the context it may reach
};
std::vector<RequestTokens> workload_token_counts(const Workload& w, const Tokenizer& tok);

}  // namespace kvscope
