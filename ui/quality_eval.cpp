#include "quality_eval.h"

#include <QObject>
#include <algorithm>
#include <cmath>
#include <exception>

#include "cpu/cpu_backend.h"

namespace kvscope::ui {

EvalConfig eval_config_of(const EngineConfig& cfg, int threads) {
  EvalConfig e;
  e.kv_dtype = cfg.kv_dtype;
  e.window = cfg.window;
  e.sinks = cfg.sinks;
  e.block_size = cfg.block_size;
  e.threads = threads;
  return e;  // chunk: eval_text's default, so the numbers match `kvscope-cli eval`
}

double mean_nll(const std::vector<std::vector<float>>& logits, const std::vector<TokenId>& tokens) {
  double nll = 0;
  for (size_t i = 0; i < logits.size() && i + 1 < tokens.size(); ++i) {
    const std::vector<float>& row = logits[i];
    // log softmax in double, as the core's eval does: -log p = logsumexp(row) - row[target].
    const double mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
    nll += mx + std::log(sum) - row[static_cast<size_t>(tokens[i + 1])];
  }
  return logits.empty() ? 0.0 : nll / static_cast<double>(logits.size());
}

QualityResult run_quality_eval(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens, const EvalConfig& cfg,
                               const std::function<bool(int, int)>& progress) {
  QualityResult r;
  const int32_t n = static_cast<int32_t>(tokens.size());
  if (n < 2) {
    r.error = QObject::tr("the text has fewer than 2 tokens");
    return r;
  }
  try {
    // The engine eval_text builds: the whole text fits the pool, one sequence, chunked prefill,
    // no prefix cache (every position must be computed to have its logits).
    EngineConfig ec;
    ec.block_size = cfg.block_size;
    ec.num_blocks = (n + 1 + cfg.block_size - 1) / cfg.block_size + 2;
    ec.kv_dtype = cfg.kv_dtype;
    ec.prefix_caching = false;
    ec.window = cfg.window;
    ec.sinks = cfg.sinks;
    ec.sched.max_running = 1;
    ec.sched.max_batched_tokens = cfg.chunk;
    ec.sched.max_model_len = n + 1;
    Engine engine(model, std::make_unique<CpuBackend>(model, cfg.threads), ec);
    Request req;
    req.prompt = tokens;
    req.max_new_tokens = 1;
    req.ignore_eos = true;
    req.record_prompt_logits = true;
    req.label = "quality";
    const SeqId id = engine.submit(req);
    while (engine.step()) {
      if (progress && !progress(std::min(engine.sequence(id).num_computed, n), n)) {
        r.error = QObject::tr("stopped");
        return r;
      }
    }
    const Sequence& s = engine.sequence(id);
    if (s.state == SeqState::Rejected) {
      r.error = QObject::tr("the engine rejected the text: %1").arg(QString::fromStdString(s.error));
      return r;
    }
    auto rows = std::make_shared<std::vector<std::vector<float>>>(engine.recorded_prompt_logits(id));
    if (static_cast<int32_t>(rows->size()) != n - 1) {
      r.error = QObject::tr("expected %1 logits rows, got %2").arg(n - 1).arg(rows->size());
      return r;
    }
    r.nTokens = n;
    r.nllMean = mean_nll(*rows, tokens);
    r.perplexity = std::exp(r.nllMean);
    r.kvBytesPerToken = engine.backend().kv_layout().bytes_per_token();
    r.logits = std::move(rows);
  } catch (const std::exception& e) {
    r.error = QString::fromUtf8(e.what());
  }
  return r;
}

}  // namespace kvscope::ui
