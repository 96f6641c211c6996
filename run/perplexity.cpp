#include "run/perplexity.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backend_factory.h"
#include "engine/engine.h"

namespace kvscope {

namespace {

// log softmax in double: the KL of two close distributions is a difference of small numbers.
std::vector<double> log_softmax(const std::vector<float>& x) {
  const double mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(v - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] - lse;
  return y;
}

}  // namespace

double token_nll(std::span<const float> logits, TokenId target) {
  if (target < 0 || static_cast<size_t>(target) >= logits.size())
    throw std::invalid_argument("token_nll: target outside the vocabulary");
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(v - mx);
  return -(logits[static_cast<size_t>(target)] - mx - std::log(sum));
}

EvalRun eval_text(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens, const EvalConfig& cfg,
                  const EvalProgress& progress) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (n < 2) throw std::invalid_argument("eval: the text must have at least 2 tokens");
  EngineConfig ec;
  ec.block_size = cfg.block_size;
  ec.num_blocks = (n + 1 + cfg.block_size - 1) / cfg.block_size + 2;  // the whole text fits; window mode frees early
  ec.kv_dtype = cfg.kv_dtype;
  ec.kv_quant_group = cfg.kv_quant_group;
  ec.kivi_residual = kivi_residual_for(cfg);
  ec.prefix_caching = false;  // every position must be computed to have its logits
  ec.window = cfg.window;
  ec.sinks = cfg.sinks;
  ec.evict = cfg.evict;
  ec.sinks_in_sliding_layers = cfg.sinks_in_sliding_layers;
  ec.learned_sinks = cfg.learned_sinks;
  ec.state_dtype = cfg.state_dtype;
  ec.sched.max_running = 1;
  ec.sched.max_batched_tokens = cfg.chunk;
  ec.sched.max_model_len = n + 1;  // room for the one sampled token, even past the trained context
  Engine engine(model, make_backend(cfg.backend, model, cfg.threads), ec);

  Request req;
  req.prompt = tokens;
  req.max_new_tokens = 1;
  req.ignore_eos = true;
  req.record_prompt_logits = true;
  EvalRun run;
  double nll_sum = 0;  // in double, as the per-position floats would round
  run.nll.reserve(static_cast<size_t>(n - 1));
  req.on_prompt_logits = [&](std::span<const float> row) {  // rows arrive in prompt order
    const size_t i = run.nll.size();
    if (i + 1 >= tokens.size()) throw std::logic_error("eval: more logits rows than predictions");
    const double nll = token_nll(row, tokens[i + 1]);
    nll_sum += nll;
    run.nll.push_back(static_cast<float>(nll));
    if (cfg.keep_logits) run.logits.emplace_back(row.begin(), row.end());
  };
  const SeqId id = engine.submit(req);
  while (engine.step()) {
    const auto snap = engine.snapshot();
    run.peak_blocks_used = std::max(run.peak_blocks_used, snap->memory.blocks_used);
    run.peak_kv_bytes = std::max(run.peak_kv_bytes, snap->memory.kv_used_bytes);  // every KV group's blocks
    run.peak_kept_tokens =
        std::max<int32_t>(run.peak_kept_tokens, static_cast<int32_t>(snap->memory.slots_filled - snap->eviction.holes));
    run.tokens_evicted = snap->eviction.tokens_evicted;
    run.tokens_hidden = snap->eviction.tokens_hidden;
    run.compactions = snap->eviction.compactions;
    run.bytes_copied = snap->eviction.bytes_copied;
    if (progress && !progress(std::min(engine.sequence(id).num_computed, n), n)) throw EvalStopped();
  }
  const Sequence& s = engine.sequence(id);
  if (s.state == SeqState::Rejected) throw std::runtime_error("eval: the engine rejected the text: " + s.error);
  if (static_cast<int32_t>(run.nll.size()) != n - 1)
    throw std::logic_error("eval: expected " + std::to_string(n - 1) + " logits rows, got " +
                           std::to_string(run.nll.size()));
  run.n_tokens = n;
  run.n_predicted = n - 1;
  run.kv_bytes_per_token = engine.backend().kv_bytes_per_token();
  run.state_bytes_per_seq = engine.backend().state_bytes_per_slot();
  run.peak_residual_bytes = engine.backend().kv_residual_peak_bytes();
  run.peak_kv_bytes += run.peak_residual_bytes;
  run.nll_mean = nll_sum / run.n_predicted;
  run.perplexity = std::exp(run.nll_mean);
  return run;
}

LogitsAgreement compare_logits(const std::vector<std::vector<float>>& reference,
                               const std::vector<std::vector<float>>& run) {
  if (reference.size() != run.size() || reference.empty())
    throw std::invalid_argument("compare_logits: row counts differ or are zero");
  LogitsAgreement a;
  int64_t same = 0;
  std::vector<double> kls;
  kls.reserve(reference.size());
  for (size_t r = 0; r < reference.size(); ++r) {
    const std::vector<double> lp = log_softmax(reference[r]), lq = log_softmax(run[r]);
    if (lp.size() != lq.size()) throw std::invalid_argument("compare_logits: vocabulary sizes differ");
    double kl = 0;
    for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
    kl = std::max(kl, 0.0);  // rounding can leave -1e-17 for identical rows
    a.kl_mean += kl;
    kls.push_back(kl);
    a.kl_max = std::max(a.kl_max, kl);
    const auto am = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    same += am(reference[r]) == am(run[r]);
  }
  a.kl_mean /= static_cast<double>(reference.size());
  const size_t rank = (kls.size() * 99 + 99) / 100;  // nearest rank: ceil(0.99 n), 1-based
  std::nth_element(kls.begin(), kls.begin() + static_cast<long>(rank - 1), kls.end());
  a.kl_p99 = kls[rank - 1];
  a.top1 = static_cast<double>(same) / static_cast<double>(reference.size());
  return a;
}

}  // namespace kvscope
