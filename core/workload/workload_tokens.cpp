// Tokenizer helpers for replaying workloads (see workload_tokens.h for the multi-turn recipe).
#include "workload/workload_tokens.h"

#include <map>
#include <stdexcept>
#include <string>

namespace kvscope {
namespace {

void check_ids(const WorkloadRequest& r, const Tokenizer& tok) {
  for (size_t i = 0; i < r.prompt_ids.size(); ++i) {
    const TokenId id = r.prompt_ids[i];
    if (id < 0 || id >= tok.n_vocab())
      throw std::runtime_error("workload: request \"" + r.id + "\": prompt_ids[" + std::to_string(i) +
                               "] = " + std::to_string(id) + " is outside the vocabulary (" +
                               std::to_string(tok.n_vocab()) + " tokens)");
  }
}

// SentencePiece-style vocabularies put a "▁" in front of the first word by themselves; byte-level
// BPE ones (GPT-2) glue text to whatever precedes it. Asking the tokenizer avoids guessing by name.
bool adds_space_prefix(const Tokenizer& tok) {
  const std::vector<TokenId> ids = tok.encode("a", false, false);
  return !ids.empty() && tok.token_to_piece(ids.front()).starts_with(' ');
}

}  // namespace

std::vector<TokenId> workload_prompt_ids(const WorkloadRequest& r, const Tokenizer& tok) {
  if (r.has_ids()) {
    check_ids(r, tok);
    return r.prompt_ids;
  }
  return tok.encode(r.prompt, true, false);
}

std::vector<TokenId> turn_text_ids(const WorkloadRequest& r, const Tokenizer& tok) {
  if (r.has_ids()) {
    check_ids(r, tok);
    return r.prompt_ids;
  }
  return tok.encode(adds_space_prefix(tok) ? r.prompt : " " + r.prompt, false, false);
}

std::vector<TokenId> build_turn_prompt(std::span<const TokenId> previous_tokens, const WorkloadRequest& r,
                                       const Tokenizer& tok) {
  std::vector<TokenId> out(previous_tokens.begin(), previous_tokens.end());
  if (!out.empty() && tok.is_eog(out.back())) out.pop_back();
  const std::vector<TokenId> text = turn_text_ids(r, tok);
  out.insert(out.end(), text.begin(), text.end());
  return out;
}

std::vector<RequestTokens> workload_token_counts(const Workload& w, const Tokenizer& tok) {
  std::vector<RequestTokens> out;
  std::map<std::string, int32_t> conv_total;  // conversation -> worst-case length after its last turn
  for (const WorkloadRequest& r : w.requests) {
    RequestTokens t;
    if (r.is_follow_up_turn())
      t.prompt = conv_total[r.conversation] + static_cast<int32_t>(turn_text_ids(r, tok).size());
    else
      t.prompt = static_cast<int32_t>(workload_prompt_ids(r, tok).size());
    t.max_total = t.prompt + r.max_new_tokens;
    if (!r.conversation.empty()) conv_total[r.conversation] = t.max_total;
    out.push_back(t);
  }
  return out;
}

}  // namespace kvscope
