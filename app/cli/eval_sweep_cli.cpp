#include "cli/eval_sweep_cli.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "run/eval_sweep.h"
#include "run/recompute_window.h"

namespace kvscope::cli {

namespace {

std::vector<int32_t> parse_counts(const std::string& list, const char* option, int min) {
  std::vector<int32_t> out;
  std::stringstream ss(list);
  for (std::string v; std::getline(ss, v, ',');) {
    size_t used = 0;
    int w = 0;
    try {
      w = std::stoi(v, &used);
    } catch (const std::exception&) { used = 0; }
    if (used == 0 || used != v.size() || w < min)
      throw UsageError(std::string("--") + option + " '" + v + "' is not a count >= " + std::to_string(min));
    out.push_back(w);
  }
  return out;
}

// The recompute-window baseline at each window W, on --recompute-rows rows (one count for all
// windows, or one per window) spread over [W - 1, n - 2]: the rows where a W-token window
// differs from full attention.
nlohmann::json recompute_json(const Args& a, const LoadedModel& lm, const std::vector<TokenId>& tokens,
                              const EvalConfig& base) {
  nlohmann::json out = nlohmann::json::array();
  const std::vector<int32_t> windows = parse_counts(a.str("recompute-window"), "recompute-window", 2);
  const std::vector<int32_t> counts = parse_counts(a.str("recompute-rows", "32"), "recompute-rows", 1);
  if (counts.size() != 1 && counts.size() != windows.size())
    throw UsageError("--recompute-rows takes one count or one per --recompute-window");
  const int32_t n = static_cast<int32_t>(tokens.size());
  for (size_t i = 0; i < windows.size(); ++i) {
    const int32_t w = windows[i], count = counts[counts.size() == 1 ? 0 : i];
    if (w - 1 > n - 2) throw UsageError("--recompute-window " + std::to_string(w) + " is not shorter than the text");
    EvalConfig c = base;
    c.kv_dtype = KvDtype::F32;
    c.window = c.sinks = 0;
    std::fprintf(stderr, "eval: recompute window %d on %d rows\n", w, count);
    const RecomputeRun r = eval_recompute_window(lm.model, tokens, w, spread_positions(w - 1, n - 2, count), c);
    out.push_back(
        {{"window", w}, {"rows", r.rows}, {"nll", r.nll}, {"nll_mean", r.nll_mean}, {"perplexity", r.perplexity}});
  }
  return out;
}

void print_table(const SweepResult& r) {
  std::fprintf(stderr, "%-34s %10s %10s %10s %8s %12s %8s %s\n", "point", "perplexity", "KL mean", "KL p99", "top-1",
               "peak KV B", "evicted", "frontier");
  for (const SweepPoint& p : r.points) {
    const LogitsAgreement ag = p.agreement.value_or(LogitsAgreement{-1, -1, -1, -1});
    std::fprintf(stderr, "%-34s %10.4f %10.3g %10.3g %8.4f %12lld %8llu %s\n", sweep_point_label(p.cfg).c_str(),
                 p.run.perplexity, ag.kl_mean, ag.kl_p99, ag.top1, static_cast<long long>(p.run.peak_kv_bytes),
                 static_cast<unsigned long long>(p.run.tokens_evicted), p.pareto ? "*" : "");
  }
}

}  // namespace

int run_eval_sweep(const Args& a, const LoadedModel& lm, const std::vector<TokenId>& tokens, const EvalConfig& base,
                   size_t text_tokens) {
  SweepAxes axes;
  try {
    axes = parse_sweep_axes(a.positional());
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  const bool with_kl = !a.has("no-kl"), with_nll = a.has("nll");
  nlohmann::json j;
  try {
    const SweepResult r =
        run_sweep(lm.model, tokens, base, axes, with_kl, [](const std::string& label, size_t i, size_t n) {
          std::fprintf(stderr, "eval: [%zu/%zu] %s\n", i + 1, n, label.c_str());
        });
    print_table(r);
    j = sweep_json(r, with_nll);
    if (a.has("recompute-window")) j["recompute_window"] = recompute_json(a, lm, tokens, base);
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  j["model"] = lm.path;
  j["text"] = a.str("text");
  j["text_tokens"] = text_tokens;  // the whole text, BOS included (n_tokens: the part scored)
  j["block_size"] = base.block_size;
  j["chunk"] = base.chunk;
  const std::string out = a.str("out");
  if (out.empty()) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::ofstream f(out);
  if (!f) throw UsageError("cannot write --out '" + out + "'");
  f << j.dump(1) << "\n";
  std::fprintf(stderr, "eval: wrote %s\n", out.c_str());
  return 0;
}

}  // namespace kvscope::cli
