// kvscope-cli run: replay a workload on the paged engine and (with --baseline) on the
// contiguous pre-paging allocator, same model, scheduler and pool size, and compare them.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cpu/cpu_backend.h"
#include "engine/request_story_json.h"
#include "run/workload_runner.h"
#include "workload/workload.h"

namespace kvscope::cli {

namespace {

TokenText token_text_of(const Model& m) {
  if (!m.tokenizer) return {};
  return [&m](TokenId t) { return m.tokenizer->token_to_piece(t); };
}

// --explain: every kept request story, printed as its timeline and exported as JSON.
nlohmann::json explain(const Engine& engine, bool print) {
  const TokenText text = token_text_of(engine.model());
  const int32_t bs = engine.config().block_size;
  nlohmann::json out = nlohmann::json::array();
  for (const RequestStory* s : engine.stories().all()) {
    out.push_back(story_to_json(*s, bs, text));
    if (!print) continue;
    std::printf("\nrequest %lld (%s)\n", static_cast<long long>(s->id), s->label.c_str());
    for (const StoryLine& l : story_lines(*s, bs, text))
      std::printf("  step %-6llu %s\n", static_cast<unsigned long long>(l.step), l.text.c_str());
  }
  if (print && engine.stories().dropped() > 0)
    std::printf("\n(%zu older finished requests left the bounded history of %zu)\n", engine.stories().dropped(),
                engine.stories().max_finished());
  return out;
}

nlohmann::json run_once(const Args& a, std::shared_ptr<Model> m, const Workload& wl, bool baseline, bool quiet) {
  EngineConfig cfg = engine_config(a, *m);
  if (cfg.sched.max_model_len == 0 && wl.max_model_len) cfg.sched.max_model_len = *wl.max_model_len;
  cfg.contiguous_baseline = baseline;
  const std::string reserve = a.str("baseline-reserve", "max-model-len");
  const auto policy = parse_baseline_reserve(reserve);
  if (!policy)
    throw UsageError("--baseline-reserve takes max-model-len, request or a slot count N > 0, not '" + reserve + "'");
  cfg.baseline_reserve = *policy;
  if (baseline) cfg.prefix_caching = false;  // the pre-paging allocator had no block cache
  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(m, make_backend(a, m), cfg);
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  if (!quiet) std::cerr << (baseline ? "[baseline] " : "[paged]    ") << engine->kv_summary() << "\n";
  WorkloadRunner runner(*engine, wl);
  runner.run_to_completion();
  nlohmann::json j = runner.to_json();
  j["allocator"] = baseline ? "contiguous" : "paged";
  if (baseline) j["baseline_reserve"] = baseline_reserve_name(cfg.baseline_reserve);
  j["kv_cache"] = engine->kv_summary();
  j["block_size"] = cfg.block_size;
  j["max_model_len"] = engine->config().sched.max_model_len;
  j["prefix_caching"] = cfg.prefix_caching;
  j["kv_dtype"] = kv_dtype_name(cfg.kv_dtype);
  j["window"] = cfg.window;
  j["sinks"] = cfg.sinks;
  j["backend"] = engine->backend().name();
  if (a.has("explain")) j["explain"] = explain(*engine, !baseline);
  return j;
}

void print_table(const nlohmann::json& p, const nlohmann::json* b) {
  auto cell = [](const nlohmann::json& v, const char* fmt) {
    char buf[64];
    if (v.is_number_float())
      std::snprintf(buf, sizeof buf, fmt, v.get<double>());
    else
      std::snprintf(buf, sizeof buf, fmt, static_cast<double>(v.get<int64_t>()));
    return std::string(buf);
  };
  // baseline_only: the paged column says "-" (paging has no reservations to outgrow).
  auto row = [&](const char* name, const char* key, const char* fmt, bool baseline_only = false) {
    std::printf("%-34s%20s", name, baseline_only ? "-" : cell(p[key], fmt).c_str());
    if (b) std::printf("%22s", cell((*b)[key], fmt).c_str());
    std::printf("\n");
  };
  // Two numbers in one cell: "largest / total".
  auto pair_row = [&](const char* name, const char* k1, const char* k2) {
    std::printf("%-34s%20s", name, (cell(p[k1], "%.0f") + " / " + cell(p[k2], "%.0f")).c_str());
    if (b) std::printf("%22s", (cell((*b)[k1], "%.0f") + " / " + cell((*b)[k2], "%.0f")).c_str());
    std::printf("\n");
  };
  const std::string base_name = b ? "contiguous (" + (*b).value("baseline_reserve", std::string("?")) + ")" : "";
  std::printf("%-34s%20s%22s\n", "", "paged", base_name.c_str());
  row("waste % (reserved unfilled)", "waste_pct", "%.1f");
  row("worst-step waste %", "peak_waste_pct", "%.1f");
  row("slots reserved (sum over steps)", "slots_reserved", "%.0f");
  row("slots filled (sum over steps)", "slots_filled", "%.0f");
  row("peak slots reserved", "peak_slots_reserved", "%.0f");
  row("peak slots filled", "peak_slots_filled", "%.0f");
  row("peak KV blocks used", "peak_blocks_used", "%.0f");
  row("peak KV MiB reserved", "peak_kv_bytes", "%.2f");
  pair_row("largest free run / free at peak", "largest_free_run", "total_free_at_peak");
  row("external fragmentation (worst)", "external_fragmentation", "%.2f");
  row("max concurrent requests", "max_concurrent", "%.0f");
  row("preemptions", "preemptions", "%.0f");
  row("rejected", "rejected", "%.0f");
  row("failed reservations", "failed_reservations", "%.0f", true);
  row("blocked admission steps", "blocked_admission_steps", "%.0f", true);
  row("  of which by fragmentation", "blocked_by_fragmentation_steps", "%.0f", true);
  row("overflows (outgrew reservation)", "overflows", "%.0f", true);
  row("  grown in place", "grown_in_place", "%.0f", true);
  row("  relocated (K/V copied)", "relocations", "%.0f", true);
  row("  slots copied by relocations", "relocated_slots", "%.0f", true);
  row("  preempted before growing", "overflow_preemptions", "%.0f", true);
  row("generated tokens", "generated_tokens", "%.0f");
  row("prefill tokens computed", "prefill_tokens", "%.0f");
  row("prefix-cache hit tokens", "prefix_cache_hits_tokens", "%.0f");
  row("engine steps", "steps", "%.0f");
  row("tokens/s", "tokens_per_s", "%.1f");
}

}  // namespace

int cmd_run(int argc, char** argv, int first) {
  const Args a(argc, argv, first, with_engine_options({"workload", "json-out", "baseline-reserve"}),
               {"baseline", "help", "quiet", "explain"});
  if (a.has("help") || !a.has("workload")) {
    std::cout
        << "kvscope-cli run --workload W.json [--model M] [--baseline] [--json-out F] [--block-size B] [--explain]\n"
           "  --explain: print every request's KV story (arrival, wait and why, prefix hit and the first miss's\n"
           "     reason, blocks, copies, preemptions, finish) and add it to the JSON as paged.explain\n"
           "  [--baseline-reserve max-model-len|request|N]  (what the baseline reserves per request: max_model_len,\n"
           "     min(prompt + max_tokens, max_model_len), or N slots that grow in place / move / preempt on overflow)\n"
           "  [--kv-blocks N | --kv-memory MiB] [--prefix-caching on|off] [--window W --sinks S] [--learned-sinks on|off] [--kv-dtype D] [--state-dtype f32|f16|bf16]\n"
           "  [--kv-group G] [--kivi-residual R] (kivi4/kivi2/rot4c: the newest R tokens beyond the filling block stay f16)\n"
           "  [--state-checkpoints off|prompt-end|every-block|every:N] [--checkpoint-memory MiB] (hybrid recurrent models:\n"
           "     where prefix caching keeps copies of the state, default every:8 in 256 MiB)\n"
           "  [--max-model-len N] [--max-running N] [--max-batched-tokens N] [--threads N] [--hybrid-kv auto|on|off]\n"
           "  [--evict h2o:B[:R][:layer]|snapkv:B[:W][:layer]] (token eviction: B tokens or P% of the prompt kept; --window = recent window;\n"
           "   :layer = each layer chooses its own B tokens)\n";
    return a.has("help") ? 0 : 2;
  }
  const Workload wl = load_workload(a.str("workload"));
  LoadedModel lm = load_model(a);
  const bool quiet = a.has("quiet");
  nlohmann::json out;
  out["workload"] = wl.name;
  out["model"] = lm.path;
  out["paged"] = run_once(a, lm.model, wl, false, quiet);
  if (a.has("baseline")) out["baseline"] = run_once(a, lm.model, wl, true, quiet);
  // Bytes -> MiB for the table only; the JSON keeps bytes.
  auto for_table = [](nlohmann::json j) {
    j["peak_kv_bytes"] = j["peak_kv_bytes"].get<double>() / (1 << 20);
    return j;
  };
  const nlohmann::json p = for_table(out["paged"]);
  const nlohmann::json b = a.has("baseline") ? for_table(out["baseline"]) : nlohmann::json();
  if (!quiet) print_table(p, a.has("baseline") ? &b : nullptr);
  if (a.has("json-out")) {
    std::ofstream f(a.str("json-out"));
    if (!f) throw std::runtime_error("cannot write " + a.str("json-out"));
    f << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace kvscope::cli
