#pragma once
// Seeded generators for the typical workload shapes. Same parameters and seed, same workload,
// byte for byte, on every platform (WorkloadRng, no std distributions). Prompts are
// TinyStories-style English (story_text.h). All set ignore_eos by default so that output
// lengths, and with them every memory number, are fixed by the workload rather than the model.
#include <cstdint>
#include <optional>

#include "workload/workload.h"

namespace kvscope {

// N independent requests with short, varied prompts and outputs, arriving a few steps apart:
// the shape where a contiguous allocator wastes most (it reserves max_model_len for each).
struct ManyShortChatsParams {
  int32_t n_requests = 48;
  // A story beginning cut after a random number of words: a completion model continues it.
  // Lengths follow real single-exchange chats: LMSYS-Chat-1M (Zheng et al., ICLR 2024, Table 1)
  // averages 69.5 tokens per prompt and 214.5 per response. stories260K's 512-piece vocabulary
  // spends about 2.3 tokens per word of this text (punctuation included), so 15-45 words are
  // ~35-105 tokens, mean ~70.
  int32_t min_words = 15, max_words = 45;
  int32_t min_new_tokens = 100, max_new_tokens = 330;  // mean 215
  int32_t mean_arrival_gap = 2;                        // steps; gaps are uniform in [0, 2 * mean]
  float temperature = 0.8f;                            // > 0: sampled with a per-request seed; 0: greedy
  bool ignore_eos = true;
  std::optional<int32_t> max_model_len;
  uint64_t seed = 1;
};
Workload many_short_chats(const ManyShortChatsParams& p = {});

// One long system prompt shared, as a text prefix, by N different questions with staggered
// arrivals: the prefix-caching workload.
struct SharedSystemPromptParams {
  int32_t n_questions = 16;
  int32_t story_sentences = 5;  // the story inside the system prompt
  int32_t max_new_tokens = 32;
  int32_t arrival_gap = 4;  // steps between questions
  bool ignore_eos = true;
  std::optional<int32_t> max_model_len;
  uint64_t seed = 2;
};
Workload shared_system_prompt(const SharedSystemPromptParams& p = {});

// An instruction + k worked examples ("Words: ... Story: ...") shared by N queries.
struct FewShotParams {
  int32_t n_examples = 4;
  int32_t n_queries = 16;
  int32_t max_new_tokens = 32;
  int32_t arrival_gap = 2;
  bool ignore_eos = true;
  std::optional<int32_t> max_model_len;
  uint64_t seed = 3;
};
Workload few_shot(const FewShotParams& p = {});

// C conversations x T turns. Turn 0 carries a story opening and a question; later turns carry
// only the new user text, which the replayer appends to the previous turn's full token sequence
// (build_turn_prompt), so turn t+1 shares turn t's whole context as a token prefix.
struct MultiTurnParams {
  int32_t n_conversations = 4;
  int32_t n_turns = 4;
  int32_t opening_sentences = 3;
  int32_t max_new_tokens = 32;   // per turn
  int32_t conversation_gap = 8;  // steps between conversations' first turns
  bool ignore_eos = true;
  std::optional<int32_t> max_model_len;
  uint64_t seed = 4;
};
Workload multi_turn(const MultiTurnParams& p = {});

// A long document (several short stories with distinct names) + questions about it, each
// prompt = document + question: long shared prefixes, short answers.
struct LongDocumentRagParams {
  int32_t n_stories = 5;
  int32_t sentences_per_story = 7;  // ~22 stories260K tokens per sentence
  int32_t n_questions = 8;
  int32_t max_new_tokens = 32;
  int32_t arrival_gap = 4;
  bool ignore_eos = true;
  std::optional<int32_t> max_model_len;
  uint64_t seed = 5;
};
Workload long_document_rag(const LongDocumentRagParams& p = {});

}  // namespace kvscope
