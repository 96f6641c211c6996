#pragma once
// The compare panel's quality run: a text scored teacher-forced through a fresh Engine with one
// side's KV settings (dtype, window, sinks, block size, token eviction) by core/run/perplexity's eval_text,
// the code behind `kvscope-cli eval`, with progress reported to the worker and a stop at
// shutdown. The allocator and the prefix cache do not change the numbers (they only decide where
// K/V live), so the run always pages and never reuses a prefix: every position is computed.
#include <QMetaType>
#include <QString>
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "run/perplexity.h"
#include "model/model.h"

namespace kvscope::ui {

using LogitsRows = std::shared_ptr<const std::vector<std::vector<float>>>;

struct QualityResult {
  quint64 tag = 0;
  QString error;    // non-empty: the run failed (nothing else is meaningful)
  int nTokens = 0;  // BOS included
  double nllMean = 0, perplexity = 0;
  qint64 kvBytesPerToken = 0;
  quint64 tokensEvicted = 0;  // token eviction: what the scored run evicted (0 without)
  LogitsRows logits;          // [nTokens - 1][n_vocab]: row i predicts token i + 1
};

// The eval settings of an engine configuration (its KV dtype, window, sinks, block size,
// token eviction).
EvalConfig eval_config_of(const EngineConfig& cfg, int threads);

// progress(done, total) is called after each step with the prompt positions computed so far;
// returning false stops the run (the result then carries an error). Throws nothing.
// SnapKV without a selection point (select_at 0) chooses once the first half of the text is
// computed, as `kvscope-cli eval --snapkv-at N/2` would: at 0 it would choose after the whole
// text, i.e. after every scored row, and the run would score exactly like a full cache.
QualityResult run_quality_eval(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens,
                               const EvalConfig& cfg, const std::function<bool(int, int)>& progress);

}  // namespace kvscope::ui

Q_DECLARE_METATYPE(kvscope::ui::QualityResult)
