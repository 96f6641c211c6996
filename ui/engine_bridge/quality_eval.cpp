#include "engine_bridge/quality_eval.h"

#include <QObject>
#include <exception>
#include <utility>

namespace kvscope::ui {

EvalConfig eval_config_of(const EngineConfig& cfg, int threads) {
  EvalConfig e;
  e.kv_dtype = cfg.kv_dtype;
  e.window = cfg.window;
  e.sinks = cfg.sinks;
  e.sinks_in_sliding_layers = cfg.sinks_in_sliding_layers;
  e.learned_sinks = cfg.learned_sinks;
  e.block_size = cfg.block_size;
  e.threads = threads;
  e.evict = cfg.evict;  // a percentage budget is then a share of the scored text
  return e;             // chunk: eval_text's default, so the numbers match `kvscope-cli eval`
}

QualityResult run_quality_eval(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens,
                               const EvalConfig& cfg, const std::function<bool(int, int)>& progress) {
  QualityResult r;
  if (tokens.size() < 2) {
    r.error = QObject::tr("the text has fewer than 2 tokens");
    return r;
  }
  EvalConfig c = cfg;
  if (c.evict.policy == EvictPolicy::SnapKV && c.evict.select_at == 0)
    c.evict.select_at = static_cast<int32_t>(tokens.size() / 2);
  try {
    EvalRun run = eval_text(std::move(model), tokens, c, progress);
    r.nTokens = run.n_tokens;
    r.nllMean = run.nll_mean;
    r.perplexity = run.perplexity;
    r.kvBytesPerToken = run.kv_bytes_per_token;
    r.tokensEvicted = run.tokens_evicted;
    r.logits = std::make_shared<const std::vector<std::vector<float>>>(std::move(run.logits));
  } catch (const EvalStopped&) { r.error = QObject::tr("stopped"); } catch (const std::exception& e) {
    r.error = QString::fromUtf8(e.what());
  }
  return r;
}

}  // namespace kvscope::ui
