#pragma once
// `kvscope-cli eval --sweep`: one quality yardstick over a grid of KV configurations. The axes
// (dtype x KIVI residual x window x sinks x token eviction) expand to points; the f32 full-attention reference runs once, every
// point is scored against it (perplexity, mean / p99 KL, top-1 agreement, peak KV bytes), and
// the points that no other point beats on both peak KV bytes and mean KL are marked as the
// Pareto frontier.
//
// Adding an axis (as `evict` was): a vector in SweepAxes, a name in parse_sweep_axes, one more
// loop in sweep_points, and the field in sweep_point_json.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run/perplexity.h"

namespace kvscope {

struct SweepAxes {
  std::vector<KvDtype> dtypes{KvDtype::F32};
  std::vector<int32_t> windows{0};
  std::vector<int32_t> sinks{0};
  std::vector<EvictConfig> evicts{EvictConfig{}};  // `--evict` specs; off by default
  // KIVI residuals (EvalConfig::kivi_residual), for the KIVI dtypes only (the others run once
  // with 0); empty: the base config's (`--kivi-residual`).
  std::vector<int32_t> residuals;
  // gpt-oss's trained sink logits on (true) or dropped (false): learned=on,off.
  std::vector<bool> learned{true};
  // Hybrid recurrent models: the state slots' dtype, state=f32,f16,bf16.
  std::vector<StateDtype> states{StateDtype::F32};
};

// Axes from "name=v1,v2,..." words: dtype=f16,int8,kivi4 window=0,512 sinks=0,4
// evict=off,h2o:20%,snapkv:20% residual=0,64,128 learned=on,off state=f32,bf16. An axis not named keeps its default (f32 / 0 / 0 / off). Throws
// std::invalid_argument naming the bad word (unknown axis, repeated axis, bad or negative
// value, a bad eviction spec, empty list).
SweepAxes parse_sweep_axes(const std::vector<std::string>& words);

// The grid in dtype-major order (then residual; evict, then learned innermost), each point `base` with that
// dtype / KIVI residual / window / sinks / eviction. Left out, as not configurations: sinks with no window or sinks >= window
// (without eviction); an eviction policy with a window > 0 (with eviction the engine reads
// --window as the policy's recent window, not an attention window, so the point would be a
// different thing than its label says; eviction points pair with window 0, and their sinks are
// the first tokens never evicted). Eviction points keep base.evict.select_at (`--snapkv-at`).
std::vector<EvalConfig> sweep_points(const SweepAxes& axes, const EvalConfig& base);

struct SweepPoint {
  EvalConfig cfg;
  EvalRun run;                               // logits dropped once compared
  std::optional<LogitsAgreement> agreement;  // none when the sweep runs without KL
  bool pareto = false;
};

struct SweepResult {
  EvalConfig reference_cfg;  // f32, full attention
  EvalRun reference;
  std::vector<SweepPoint> points;
};

// Called before each run: the label ("reference" or the point's) and its index of the total.
using SweepProgress = std::function<void(const std::string& label, size_t index, size_t total)>;

// with_kl false: no logits are kept (a long text on a big vocabulary), the points carry
// perplexity and per-position NLL only, and the frontier is taken on perplexity instead of KL.
SweepResult run_sweep(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens, const EvalConfig& base,
                      const SweepAxes& axes, bool with_kl, const SweepProgress& progress = {});

// Marks the points no other point dominates: smaller-or-equal peak KV bytes and quality loss
// (mean KL, or perplexity without KL), one of them strictly.
void mark_pareto(std::vector<SweepPoint>& points);

std::string sweep_point_label(const EvalConfig& c);
// One point's JSON: config (evict: describe_evict, "off" without), perplexity, nll_mean, kl_mean, kl_p99, kl_max, top1_agreement (null
// without KL), kv_bytes_per_token, peak_kv_bytes, peak_residual_bytes, peak_blocks_used, tokens_evicted, peak_kept_tokens, compactions, compaction_bytes_copied, pareto;
// "nll" (per position) when with_nll.
nlohmann::json sweep_point_json(const SweepPoint& p, bool with_nll);
nlohmann::json sweep_json(const SweepResult& r, bool with_nll);

}  // namespace kvscope
