#pragma once
// Quality of a KV configuration on a text: teacher-forced next-token distributions through the
// real engine (paged KV, chunked prefill, the chosen KV dtype / window / sinks), perplexity,
// and the distance of those distributions from a reference run (KL divergence, top-1
// agreement). Used by `kvscope-cli eval` and tests/run/test_eval.cpp.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "backend_factory.h"
#include "engine/evict_config.h"
#include "kv/kv_dtype.h"
#include "kv/state_dtype.h"
#include "model/model.h"

namespace kvscope {

struct EvalConfig {
  KvDtype kv_dtype = KvDtype::F32;
  StateDtype state_dtype = StateDtype::F32;  // EngineConfig::state_dtype (hybrid recurrent models)
  int32_t window = 0;
  int32_t sinks = 0;
  bool sinks_in_sliding_layers = true;  // EngineConfig::sinks_in_sliding_layers (Gemma 3's own SWA layers)
  bool learned_sinks = true;            // EngineConfig::learned_sinks (gpt-oss's trained sink logits)
  int32_t block_size = 16;
  int32_t kv_quant_group = 0;  // EngineConfig::kv_quant_group (packed 4/2-bit dtypes)
  // EngineConfig::kivi_residual, applied to kivi4/kivi2 only (other dtypes run with 0, so one
  // setting serves a list or sweep of dtypes): kivi_residual_for() is what a run uses.
  int32_t kivi_residual = 0;
  int32_t chunk = 64;  // max batched tokens per step: long texts are prefilled in chunks
  int threads = 0;     // CPU threads, 0: all cores
  // From the one backend factory. The CPU by default: evals compare KV settings, and the CUDA
  // backend refuses some of them (rot4c, token eviction).
  BackendKind backend = BackendKind::Cpu;
  EvictConfig evict;  // token eviction (one KV group: the hybrid KV cache is off then)
  // Keep every next-token distribution in EvalRun::logits (needed for KL against a reference).
  // Off, only the per-position NLL is kept: what a long text's perplexity needs on a big vocabulary.
  bool keep_logits = true;
};

inline int32_t kivi_residual_for(const EvalConfig& c) {
  return kv_dtype_block_quantized(c.kv_dtype) ? c.kivi_residual : 0;
}

struct EvalRun {
  int32_t n_tokens = 0;             // text length, BOS included
  int32_t n_predicted = 0;          // n_tokens - 1 predictions
  double nll_mean = 0;              // mean negative log-likelihood (nats)
  double perplexity = 0;            // exp(nll_mean)
  int64_t kv_bytes_per_token = 0;   // KvLayout::bytes_per_token (scales included)
  int64_t state_bytes_per_seq = 0;  // a hybrid model's recurrent state slot (0 for the others)
  int32_t peak_blocks_used = 0;     // largest blocks_used over the run's snapshots
  int64_t peak_kv_bytes = 0;  // largest snapshot kv_used_bytes (blocks held, all groups) + KIVI's peak f16 residual
  int64_t peak_residual_bytes = 0;  // KIVI: the f16 residual's part of peak_kv_bytes
  int32_t peak_kept_tokens = 0;     // token eviction: most slots held minus holes
  uint64_t tokens_evicted = 0, compactions = 0;
  uint64_t tokens_hidden = 0;              // per-layer eviction: (layer, token) pairs one layer dropped
  int64_t bytes_copied = 0;                // by compactions
  std::vector<float> nll;                  // [n_predicted]: -log p(token i + 1 | tokens 0..i), nats
  std::vector<std::vector<float>> logits;  // [n_predicted][n_vocab]: row i predicts token i + 1 (keep_logits)
};

// -log softmax(logits)[target], in double.
double token_nll(std::span<const float> logits, TokenId target);

// Called after every engine step with the prompt positions computed so far and the text's
// length; returning false stops the run (eval_text then throws EvalStopped).
using EvalProgress = std::function<bool(int32_t done, int32_t total)>;
struct EvalStopped : std::runtime_error {
  EvalStopped() : std::runtime_error("eval: stopped") {}
};

// Runs the whole text as one prompt (max_new_tokens 1, prefix caching off) and scores it.
// Throws std::invalid_argument for a text shorter than 2 tokens or a bad config.
EvalRun eval_text(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens, const EvalConfig& cfg,
                  const EvalProgress& progress = {});

struct LogitsAgreement {
  double kl_mean = 0;  // mean over positions of KL(reference || run), nats
  double kl_max = 0;
  double kl_p99 = 0;  // 99th percentile over positions (nearest rank)
  double top1 = 0;    // fraction of positions whose argmax matches the reference's
};
LogitsAgreement compare_logits(const std::vector<std::vector<float>>& reference,
                               const std::vector<std::vector<float>>& run);

}  // namespace kvscope
