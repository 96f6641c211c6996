// kvscope-cli eval: what a KV configuration costs in quality on a text. Perplexity of the
// text, and KL divergence / top-1 agreement of every next-token distribution against the
// reference run (f32 KV, full attention) on the same text, through the real engine.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/eval_sweep_cli.h"
#include "run/perplexity.h"

namespace kvscope::cli {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError("cannot read --text '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

nlohmann::json run_json(const EvalRun& r, const EvalConfig& c) {
  return {{"kv_dtype", kv_dtype_name(c.kv_dtype)},
          {"kv_group", kv_dtype_packed(c.kv_dtype) ? c.kv_quant_group : 0},
          {"kivi_residual", kivi_residual_for(c)},
          {"window", c.window},
          {"sinks", c.sinks},
          {"perplexity", r.perplexity},
          {"nll_mean", r.nll_mean},
          {"kv_bytes_per_token", r.kv_bytes_per_token},
          {"state_dtype", state_dtype_name(c.state_dtype)},
          {"state_bytes_per_seq", r.state_bytes_per_seq},
          {"peak_blocks_used", r.peak_blocks_used},
          {"peak_kv_bytes", r.peak_kv_bytes},
          {"peak_residual_bytes", r.peak_residual_bytes},
          {"evict", describe_evict(c.evict)},
          {"peak_kept_tokens", r.peak_kept_tokens},
          {"tokens_evicted", r.tokens_evicted},
          {"tokens_hidden", r.tokens_hidden},
          {"compactions", r.compactions},
          {"compaction_bytes_copied", r.bytes_copied}};
}

// --evict SPEC or SPEC1,SPEC2,... (engine/evict_config.h); "off" is a spec too.
std::vector<EvictConfig> parse_evict_list(const std::string& list, int32_t select_at) {
  std::vector<EvictConfig> out;
  std::stringstream ss(list);
  for (std::string spec; std::getline(ss, spec, ',');) {
    try {
      out.push_back(parse_evict(spec));
    } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
    out.back().select_at = select_at;
  }
  if (out.empty()) throw UsageError("--evict needs at least one policy (or off)");
  return out;
}

// --kv-dtype D or a comma-separated list D1,D2,... (the f32 reference is computed once).
std::vector<KvDtype> parse_dtype_list(const std::string& list) {
  std::vector<KvDtype> out;
  std::stringstream ss(list);
  for (std::string dt; std::getline(ss, dt, ',');) {
    const auto parsed = parse_kv_dtype(dt);
    if (!parsed) throw UsageError("--kv-dtype '" + dt + "' is not one of " + kv_dtype_choices());
    out.push_back(*parsed);
  }
  if (out.empty()) throw UsageError("--kv-dtype needs at least one dtype");
  return out;
}

// --kivi-residual R or R1,R2,...: every block-quantized dtype (kivi4, kivi2, rot4c) of the list runs once per R, the others once.
std::vector<int32_t> parse_residual_list(const std::string& list) {
  std::vector<int32_t> out;
  std::stringstream ss(list);
  for (std::string r; std::getline(ss, r, ',');) {
    char* end = nullptr;
    const long v = std::strtol(r.c_str(), &end, 10);
    if (r.empty() || *end != '\0' || v < 0 || v > (1 << 24))
      throw UsageError("--kivi-residual '" + r + "' is not a token count >= 0");
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) throw UsageError("--kivi-residual needs at least one value");
  return out;
}

}  // namespace

int cmd_eval(int argc, char** argv, int first) {
  const Args a(argc, argv, first,
               {"model", "text", "kv-dtype", "kv-group", "kivi-residual", "window", "sinks", "block-size", "threads",
                "chunk", "max-tokens", "out", "recompute-window", "recompute-rows", "sinks-layers", "evict",
                "snapkv-at", "learned-sinks", "state-dtype"},
               {"json", "help", "sweep", "nll", "no-kl"});
  if (a.has("help")) {
    std::cout
        << "kvscope-cli eval --model M --text FILE [--kv-dtype D[,D2,...]: " << kv_dtype_choices()
        << "]\n"
           "  [--kv-group G] [--kivi-residual R[,R2,...]] [--window W --sinks S [--sinks-layers all|global]] [--learned-sinks on|off] [--json] [--block-size 16] [--chunk 64] [--threads N] [--max-tokens N]\n"
           "  [--evict h2o:B|snapkv:B[,...]] (B tokens or P%; with it --window is the recent window; h2o:B:layer per layer) [--snapkv-at N]\n"
           "Perplexity of the text (BOS + text), and mean KL(reference || run) and top-1 agreement of\n"
           "the next-token distributions against the f32-KV full-attention run on the same text.\n"
           "kvscope-cli eval --model M --text FILE --sweep dtype=f16,int8,kivi4 window=0,512 sinks=0,4 [evict=off,h2o:20%,snapkv:20%]\n"
           "  [residual=0,64,128] (KIVI dtypes only) [learned=on,off] (gpt-oss's trained sink logits kept or dropped)\n"
           "  [state=f32,f16,bf16] (a hybrid model's recurrent state slots)\n"
           "  [--out FILE.json] [--nll] [--no-kl] [--snapkv-at N] [--recompute-window W1,W2 [--recompute-rows R | R1,R2]] [common options]\n"
           "The grid (dtype x residual x window x sinks x evict; sinks need a wider window, eviction pairs with window 0 only),\n"
           "each point against the f32 full-attention reference run once: perplexity, KL mean/p99, top-1, peak KV bytes,\n"
           "tokens evicted, Pareto frontier (peak KV vs KL).\n"
           "--nll: per-position NLL of every run in the JSON; --no-kl: keep no logits (long texts on big vocabularies),\n"
           "the frontier is then on perplexity; --recompute-window: StreamingLLM's re-computation baseline (BOS + the\n"
           "last W-1 tokens re-encoded for each scored row) on --recompute-rows rows spread over [W-1, n-2].\n"
           "--sinks-layers global: on a model with its own sliding-window layers (Gemma 3) only the full-attention\n"
           "layers see the sinks; the sliding ones keep their trained window without them (default all).\n"
           "--learned-sinks off: drop gpt-oss's trained sink logits (attn_sinks) from the softmax, to see what they do.\n"
           "--state-dtype f16|bf16: a hybrid model's recurrent state (lfm2, qwen35, granitehybrid) in 16 bits, rounded\n"
           "each token; the reference keeps it in f32.\n"
           "benchmarks/plot_sweep.py draws the Pareto and per-position NLL PNGs from the JSON.\n";
    return 0;
  }
  if (!a.has("text")) throw UsageError("--text FILE is required");
  LoadedModel lm = load_model(a);
  const std::string text = read_text(a.str("text"));
  std::vector<TokenId> tokens = lm.model->tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  const size_t text_tokens = tokens.size();  // before --max-tokens
  const int64_t max_tokens = a.i64("max-tokens", 0);
  if (max_tokens < 0) throw UsageError("--max-tokens must be >= 0");
  if (max_tokens > 0 && static_cast<int64_t>(tokens.size()) > max_tokens)
    tokens.resize(static_cast<size_t>(max_tokens));
  if (tokens.size() < 2) throw UsageError("the text has fewer than 2 tokens");

  EvalConfig cfg;
  const std::vector<KvDtype> dtypes = parse_dtype_list(a.str("kv-dtype", "f32"));
  cfg.kv_dtype = dtypes[0];
  cfg.kv_quant_group = static_cast<int32_t>(a.i64("kv-group", 0));
  const std::vector<int32_t> residuals = parse_residual_list(a.str("kivi-residual", "0"));
  cfg.kivi_residual = residuals[0];
  cfg.window = static_cast<int32_t>(a.i64("window", 0));
  cfg.sinks = static_cast<int32_t>(a.i64("sinks", 0));
  const std::string sinks_layers = a.str("sinks-layers", "all");
  if (sinks_layers != "all" && sinks_layers != "global")
    throw UsageError("--sinks-layers is all or global, not '" + sinks_layers + "'");
  cfg.sinks_in_sliding_layers = sinks_layers == "all";
  const std::string learned = a.str("learned-sinks", "on");
  if (learned != "on" && learned != "off") throw UsageError("--learned-sinks is on or off, not '" + learned + "'");
  cfg.learned_sinks = learned == "on";
  const auto state = parse_state_dtype(a.str("state-dtype", "f32"));
  if (!state) throw UsageError("--state-dtype is one of " + std::string(state_dtype_choices()));
  cfg.state_dtype = *state;
  cfg.block_size = static_cast<int32_t>(a.i64("block-size", 16));
  cfg.chunk = static_cast<int32_t>(a.i64("chunk", 64));
  cfg.threads = static_cast<int>(a.i64("threads", 0));
  if (cfg.window < 0 || cfg.sinks < 0) throw UsageError("--window and --sinks must be >= 0");
  const std::vector<EvictConfig> evicts =
      parse_evict_list(a.str("evict", "off"), static_cast<int32_t>(a.i64("snapkv-at", 0)));
  const bool any_evict = std::any_of(evicts.begin(), evicts.end(), [](const EvictConfig& e) { return e.on(); });
  if (cfg.sinks > 0 && cfg.window == 0 && !any_evict) throw UsageError("--sinks needs --window (or --evict)");
  if (cfg.chunk < 1 || cfg.threads < 0) throw UsageError("--chunk must be >= 1 and --threads >= 0");
  if (a.has("sweep")) {
    // One way to name eviction in a sweep: its axis (a flag beside it would be a second, silent axis).
    if (a.has("evict"))
      throw UsageError("with --sweep, name token eviction as an axis (evict=off,h2o:20%,...), not --evict");
    if (residuals.size() > 1)
      throw UsageError("with --sweep, name several KIVI residuals as an axis (residual=0,64,...), not --kivi-residual");
    for (const std::string& w : a.positional())
      if (a.has("kivi-residual") && w.rfind("residual=", 0) == 0)
        throw UsageError("--kivi-residual beside the sweep's residual axis: give one of them");
    cfg.evict.select_at = evicts[0].select_at;  // --snapkv-at, for the axis' snapkv points
    return run_eval_sweep(a, lm, tokens, cfg, text_tokens);
  }
  if (!a.positional().empty()) throw UsageError("unexpected '" + a.positional()[0] + "' (sweep axes need --sweep)");
  EvalConfig ref_cfg = cfg;
  ref_cfg.kv_dtype = KvDtype::F32;
  ref_cfg.state_dtype = StateDtype::F32;
  ref_cfg.window = 0;
  ref_cfg.sinks = 0;

  // The reference once, then each dtype of the list against it.
  EvalRun ref;
  std::vector<EvalRun> runs;
  std::vector<LogitsAgreement> ags;
  std::vector<EvalConfig> cfgs;
  try {
    ref = eval_text(lm.model, tokens, ref_cfg);
    for (KvDtype t : dtypes)
      for (size_t ri = 0; ri < (kv_dtype_block_quantized(t) ? residuals.size() : 1); ++ri)
        for (const EvictConfig& e : evicts) {
          cfgs.push_back(cfg);
          cfgs.back().kv_dtype = t;
          cfgs.back().kivi_residual = residuals[ri];
          cfgs.back().evict = e;
          runs.push_back(eval_text(lm.model, tokens, cfgs.back()));
          ags.push_back(compare_logits(ref.logits, runs.back().logits));
          runs.back().logits.clear();  // only the reference's are needed from here on
        }
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  auto run_with_agreement = [&](size_t i) {
    nlohmann::json j = run_json(runs[i], cfgs[i]);
    j["kl_mean"] = ags[i].kl_mean;
    j["kl_max"] = ags[i].kl_max;
    j["kl_p99"] = ags[i].kl_p99;
    j["top1_agreement"] = ags[i].top1;
    return j;
  };
  if (a.has("json")) {
    // One dtype: the run's fields at the top level (as before lists existed); several: "runs".
    nlohmann::json j = runs.size() == 1 ? run_with_agreement(0) : nlohmann::json::object();
    if (runs.size() > 1)
      for (size_t i = 0; i < runs.size(); ++i) j["runs"].push_back(run_with_agreement(i));
    j["model"] = lm.path;
    j["text"] = a.str("text");
    j["n_tokens"] = ref.n_tokens;
    j["reference"] = run_json(ref, ref_cfg);
    j["reference"]["kl_mean"] = 0.0;
    j["reference"]["top1_agreement"] = 1.0;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%s, %d tokens (BOS included)\n", lm.path.c_str(), ref.n_tokens);
  std::printf("%-34s %10s %10s %10s %8s %10s %12s\n", "config", "perplexity", "KL mean", "KL p99", "top-1",
              "KV B/token", "peak KV B");
  auto row = [](const char* name, const EvalRun& r, double kl, double p99, double top1) {
    std::printf("%-34s %10.4f %10.3g %10.3g %8.4f %10lld %12lld\n", name, r.perplexity, kl, p99, top1,
                static_cast<long long>(r.kv_bytes_per_token), static_cast<long long>(r.peak_kv_bytes));
  };
  row("reference: f32, full attention", ref, 0.0, 0.0, 1.0);
  for (size_t i = 0; i < runs.size(); ++i) {
    char name[96];
    const std::string res = kivi_residual_for(cfgs[i]) > 0 ? " R " + std::to_string(kivi_residual_for(cfgs[i])) : "";
    std::snprintf(name, sizeof name, "%s%s window %d sinks %d%s%s", kv_dtype_name(cfgs[i].kv_dtype), res.c_str(),
                  cfg.window, cfg.sinks, cfgs[i].evict.on() ? " " : "",
                  cfgs[i].evict.on() ? describe_evict(cfgs[i].evict).c_str() : "");
    row(name, runs[i], ags[i].kl_mean, ags[i].kl_p99, ags[i].top1);
  }
  return 0;
}

}  // namespace kvscope::cli
