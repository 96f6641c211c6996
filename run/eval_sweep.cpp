#include "run/eval_sweep.h"

#include <set>
#include <sstream>
#include <stdexcept>

namespace kvscope {

namespace {

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string v; std::getline(ss, v, ',');) out.push_back(v);
  return out;
}

std::vector<int32_t> parse_counts(const std::string& word, const std::vector<std::string>& values) {
  std::vector<int32_t> out;
  for (const std::string& v : values) {
    size_t used = 0;
    long long x = -1;
    try {
      x = std::stoll(v, &used);
    } catch (const std::exception&) { used = 0; }
    if (used == 0 || used != v.size() || x < 0 || x > (1 << 30))
      throw std::invalid_argument("--sweep '" + word + "': '" + v + "' is not a count >= 0");
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

}  // namespace

SweepAxes parse_sweep_axes(const std::vector<std::string>& words) {
  SweepAxes axes;
  std::set<std::string> seen;
  for (const std::string& w : words) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::invalid_argument("--sweep '" + w +
                                  "': expected AXIS=V1,V2,... with AXIS one of dtype, window, sinks, evict, residual, "
                                  "learned, state");
    const std::string name = w.substr(0, eq);
    const std::vector<std::string> values = split_commas(w.substr(eq + 1));
    if (values.empty()) throw std::invalid_argument("--sweep '" + w + "': no values");
    if (!seen.insert(name).second) throw std::invalid_argument("--sweep: axis '" + name + "' given twice");
    if (name == "dtype") {
      axes.dtypes.clear();
      for (const std::string& v : values) {
        const auto t = parse_kv_dtype(v);
        if (!t) throw std::invalid_argument("--sweep '" + w + "': '" + v + "' is not one of " + kv_dtype_choices());
        axes.dtypes.push_back(*t);
      }
    } else if (name == "window") {
      axes.windows = parse_counts(w, values);
    } else if (name == "sinks") {
      axes.sinks = parse_counts(w, values);
    } else if (name == "residual") {
      axes.residuals = parse_counts(w, values);
    } else if (name == "learned") {
      axes.learned.clear();
      for (const std::string& v : values) {
        if (v != "on" && v != "off") throw std::invalid_argument("--sweep '" + w + "': '" + v + "' is not on or off");
        axes.learned.push_back(v == "on");
      }
    } else if (name == "state") {
      axes.states.clear();
      for (const std::string& v : values) {
        const auto t = parse_state_dtype(v);
        if (!t) throw std::invalid_argument("--sweep '" + w + "': '" + v + "' is not one of " + state_dtype_choices());
        axes.states.push_back(*t);
      }
    } else if (name == "evict") {
      axes.evicts.clear();
      for (const std::string& v : values) {
        try {
          axes.evicts.push_back(parse_evict(v));
        } catch (const std::invalid_argument& e) { throw std::invalid_argument("--sweep '" + w + "': " + e.what()); }
      }
    } else {
      throw std::invalid_argument("--sweep '" + w + "': unknown axis '" + name +
                                  "' (dtype, window, sinks, evict, residual, learned, state)");
    }
  }
  return axes;
}

std::vector<EvalConfig> sweep_points(const SweepAxes& axes, const EvalConfig& base) {
  std::vector<EvalConfig> out;
  const std::vector<int32_t> base_residual{base.kivi_residual}, none{0};
  for (KvDtype t : axes.dtypes)
    for (int32_t r : !kv_dtype_block_quantized(t) ? none : axes.residuals.empty() ? base_residual : axes.residuals)
      for (int32_t w : axes.windows)
        for (int32_t s : axes.sinks)
          for (const EvictConfig& e : axes.evicts)
            for (bool learned : axes.learned)
              for (StateDtype state : axes.states) {
                // With eviction `window` would be the policy's recent window (sweep_points' comment).
                if (e.on() ? w > 0 : s > 0 && (w == 0 || s >= w)) continue;  // else sinks need a wider window
                EvalConfig c = base;
                c.kv_dtype = t;
                c.kivi_residual = r;
                c.window = w;
                c.sinks = s;
                c.evict = e;
                c.evict.select_at = e.on() ? base.evict.select_at : 0;
                c.learned_sinks = learned;
                c.state_dtype = state;
                out.push_back(c);
              }
  return out;
}

std::string sweep_point_label(const EvalConfig& c) {
  std::string s = kv_dtype_name(c.kv_dtype);
  if (kivi_residual_for(c) > 0) s += " R " + std::to_string(kivi_residual_for(c));
  s += c.window > 0 ? " window " + std::to_string(c.window) : " full";
  if (c.sinks > 0) s += " sinks " + std::to_string(c.sinks) + (c.sinks_in_sliding_layers ? "" : " (global layers)");
  if (c.evict.on()) s += " " + describe_evict(c.evict);
  if (!c.learned_sinks) s += " no learned sinks";
  if (c.state_dtype != StateDtype::F32) s += std::string(" state ") + state_dtype_name(c.state_dtype);
  return s;
}

SweepResult run_sweep(std::shared_ptr<const Model> model, const std::vector<TokenId>& tokens, const EvalConfig& base,
                      const SweepAxes& axes, bool with_kl, const SweepProgress& progress) {
  SweepResult r;
  r.reference_cfg = base;
  r.reference_cfg.kv_dtype = KvDtype::F32;
  r.reference_cfg.window = 0;
  r.reference_cfg.sinks = 0;
  r.reference_cfg.evict = EvictConfig{};
  r.reference_cfg.learned_sinks = true;
  r.reference_cfg.state_dtype = StateDtype::F32;
  r.reference_cfg.keep_logits = with_kl;
  const std::vector<EvalConfig> cfgs = sweep_points(axes, base);
  if (cfgs.empty())
    throw std::invalid_argument(
        "--sweep: the grid has no valid point (sinks need a window wider than them; eviction pairs with window 0)");
  if (progress) progress("reference (f32, full attention)", 0, cfgs.size() + 1);
  r.reference = eval_text(model, tokens, r.reference_cfg);
  for (size_t i = 0; i < cfgs.size(); ++i) {
    SweepPoint p;
    p.cfg = cfgs[i];
    p.cfg.keep_logits = with_kl;
    if (progress) progress(sweep_point_label(p.cfg), i + 1, cfgs.size() + 1);
    p.run = eval_text(model, tokens, p.cfg);
    if (with_kl) p.agreement = compare_logits(r.reference.logits, p.run.logits);
    p.run.logits.clear();
    p.run.logits.shrink_to_fit();
    r.points.push_back(std::move(p));
  }
  r.reference.logits.clear();
  mark_pareto(r.points);
  return r;
}

void mark_pareto(std::vector<SweepPoint>& points) {
  auto loss = [](const SweepPoint& p) { return p.agreement ? p.agreement->kl_mean : p.run.perplexity; };
  for (SweepPoint& p : points) {
    p.pareto = true;
    for (const SweepPoint& o : points) {
      const bool no_worse = o.run.peak_kv_bytes <= p.run.peak_kv_bytes && loss(o) <= loss(p);
      const bool better = o.run.peak_kv_bytes < p.run.peak_kv_bytes || loss(o) < loss(p);
      if (&o != &p && no_worse && better) {
        p.pareto = false;
        break;
      }
    }
  }
}

nlohmann::json sweep_point_json(const SweepPoint& p, bool with_nll) {
  const EvalConfig& c = p.cfg;
  const EvalRun& r = p.run;
  nlohmann::json j = {{"label", sweep_point_label(c)},
                      {"kv_dtype", kv_dtype_name(c.kv_dtype)},
                      {"kv_group", kv_dtype_packed(c.kv_dtype) ? c.kv_quant_group : 0},
                      {"kivi_residual", kivi_residual_for(c)},
                      {"window", c.window},
                      {"sinks", c.sinks},
                      {"sinks_layers", c.sinks_in_sliding_layers ? "all" : "global"},
                      {"learned_sinks", c.learned_sinks},
                      {"state_dtype", state_dtype_name(c.state_dtype)},
                      {"perplexity", r.perplexity},
                      {"nll_mean", r.nll_mean},
                      {"kv_bytes_per_token", r.kv_bytes_per_token},
                      {"state_bytes_per_seq", r.state_bytes_per_seq},
                      {"peak_kv_bytes", r.peak_kv_bytes},
                      {"peak_residual_bytes", r.peak_residual_bytes},
                      {"peak_blocks_used", r.peak_blocks_used},
                      {"evict", describe_evict(c.evict)},
                      {"tokens_evicted", r.tokens_evicted},
                      {"peak_kept_tokens", r.peak_kept_tokens},
                      {"compactions", r.compactions},
                      {"compaction_bytes_copied", r.bytes_copied},
                      {"pareto", p.pareto}};
  const nlohmann::json none;
  j["kl_mean"] = p.agreement ? nlohmann::json(p.agreement->kl_mean) : none;
  j["kl_p99"] = p.agreement ? nlohmann::json(p.agreement->kl_p99) : none;
  j["kl_max"] = p.agreement ? nlohmann::json(p.agreement->kl_max) : none;
  j["top1_agreement"] = p.agreement ? nlohmann::json(p.agreement->top1) : none;
  if (with_nll) j["nll"] = r.nll;
  return j;
}

nlohmann::json sweep_json(const SweepResult& r, bool with_nll) {
  nlohmann::json j;
  SweepPoint ref{r.reference_cfg, r.reference, std::nullopt, false};
  ref.agreement = r.points.empty() || r.points[0].agreement
                      ? std::optional<LogitsAgreement>(LogitsAgreement{0, 0, 0, 1})
                      : std::nullopt;
  j["reference"] = sweep_point_json(ref, with_nll);
  j["reference"].erase("pareto");
  j["n_tokens"] = r.reference.n_tokens;
  j["frontier_metric"] = !r.points.empty() && r.points[0].agreement ? "kl_mean" : "perplexity";
  j["points"] = nlohmann::json::array();
  for (const SweepPoint& p : r.points) j["points"].push_back(sweep_point_json(p, with_nll));
  return j;
}

}  // namespace kvscope
