#include "run/recompute_window.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "backend_factory.h"
#include "engine/engine.h"

namespace kvscope {

std::vector<int32_t> spread_positions(int32_t first, int32_t last, int32_t count) {
  std::vector<int32_t> out;
  if (last < first || count <= 0) return out;
  const int64_t span = static_cast<int64_t>(last) - first + 1;
  if (count >= span) {
    for (int32_t r = first; r <= last; ++r) out.push_back(r);
    return out;
  }
  for (int32_t i = 0; i < count; ++i)  // evenly spaced, first and last included
    out.push_back(first + static_cast<int32_t>(count == 1 ? 0 : (span - 1) * i / (count - 1)));
  return out;
}

std::vector<TokenId> recompute_window_prompt(const std::vector<TokenId>& tokens, int32_t row, int32_t window) {
  if (row < 0 || static_cast<size_t>(row) >= tokens.size())
    throw std::invalid_argument("recompute window: row outside the text");
  std::vector<TokenId> p{tokens[0]};
  const int32_t from = std::max(1, row - window + 2);
  p.insert(p.end(), tokens.begin() + from, tokens.begin() + row + 1);
  return p;
}

RecomputeRun eval_recompute_window(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens,
                                   int32_t window, const std::vector<int32_t>& rows, const EvalConfig& cfg) {
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (window < 2) throw std::invalid_argument("recompute window: the window must hold at least 2 tokens");
  if (cfg.window != 0 || cfg.sinks != 0)
    throw std::invalid_argument("recompute window: the engine itself runs full attention");
  EngineConfig ec;
  ec.block_size = cfg.block_size;
  ec.num_blocks = (window + 1 + cfg.block_size - 1) / cfg.block_size + 2;  // one window and its sampled token
  ec.kv_dtype = cfg.kv_dtype;
  ec.kv_quant_group = cfg.kv_quant_group;
  ec.kivi_residual = kivi_residual_for(cfg);
  ec.prefix_caching = false;  // from scratch: nothing is reused between windows
  ec.sched.max_running = 1;
  ec.sched.max_batched_tokens = cfg.chunk;
  ec.sched.max_model_len = window + 1;
  Engine engine(model, make_backend(cfg.backend, model, cfg.threads), ec);
  RecomputeRun run;
  run.window = window;
  double sum = 0;
  for (int32_t row : rows) {
    if (row < 0 || row > n - 2)
      throw std::invalid_argument("recompute window: row " + std::to_string(row) + " outside [0, n - 2]");
    Request req;
    req.prompt = recompute_window_prompt(tokens, row, window);
    req.max_new_tokens = 1;
    req.ignore_eos = true;
    req.record_logits = true;  // the sampling row is the prediction after the window's last token
    const SeqId id = engine.submit(req);
    engine.run_until_idle();
    if (engine.sequence(id).state == SeqState::Rejected)
      throw std::runtime_error("recompute window: " + engine.sequence(id).error);
    const auto& lg = engine.recorded_logits(id);
    if (lg.empty()) throw std::logic_error("recompute window: no logits recorded");
    const double nll = token_nll(lg[0], tokens[static_cast<size_t>(row + 1)]);
    run.rows.push_back(row);
    run.nll.push_back(static_cast<float>(nll));
    sum += nll;
  }
  run.nll_mean = rows.empty() ? 0.0 : sum / static_cast<double>(rows.size());
  run.perplexity = std::exp(run.nll_mean);
  return run;
}

}  // namespace kvscope
