// kvscope-cli bench: measured speed of the real engine path (paged KV, scheduler, sampler),
// as JSON. Ratios against other runs belong in the same process or script (noisy machines).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/bench_kv_dtypes.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cpu/cpu_backend.h"
#include "cpu/paging_probe.h"

namespace kvscope::cli {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<TokenId> random_prompt(int32_t n, int32_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> dist(3, n_vocab - 1);
  std::vector<TokenId> p(static_cast<size_t>(n));
  p[0] = 1;
  for (int32_t i = 1; i < n; ++i) p[static_cast<size_t>(i)] = dist(rng);
  return p;
}

// Prefill and decode speed of one sequence: prefill = the step that computes the whole prompt,
// decode = the following single-token steps.
// With the CPU backend also where the prefill step's time went (CpuBackend::PhaseTimes):
// attention, the weight matmuls, and the rest (embedding, norms, RoPE, activations, K/V stores).
nlohmann::json bench_single(const Args& a, std::shared_ptr<Model> m, int32_t prompt_len, int32_t gen, int reps) {
  std::vector<double> prefill, decode, attention_share, matmul_share;
  for (int r = 0; r <= reps; ++r) {  // r == 0 warms caches and page-faults the weights in
    auto engine = make_engine(a, m);
    Request req;
    req.prompt = random_prompt(prompt_len, m->config.n_vocab, 42 + static_cast<uint64_t>(r));
    req.max_new_tokens = gen;
    req.ignore_eos = true;
    engine->submit(req);
    auto* cpu = dynamic_cast<CpuBackend*>(&engine->backend());
    if (cpu) cpu->reset_phase_times();
    const auto t0 = Clock::now();
    engine->step();  // whole prompt (max_batched_tokens >= prompt_len) + first token
    const auto t1 = Clock::now();
    if (cpu && r > 0 && cpu->phase_times().forward_s > 0) {
      const CpuBackend::PhaseTimes& pt = cpu->phase_times();
      attention_share.push_back(pt.attention_s / pt.forward_s);
      matmul_share.push_back(pt.matmul_s / pt.forward_s);
    }
    engine->run_until_idle();
    const auto t2 = Clock::now();
    if (r == 0) continue;
    prefill.push_back(prompt_len / std::chrono::duration<double>(t1 - t0).count());
    decode.push_back((gen - 1) / std::chrono::duration<double>(t2 - t1).count());
  }
  nlohmann::json j{{"prompt_len", prompt_len},
                   {"gen", gen},
                   {"reps", reps},
                   {"prefill_tokens_per_s", median(prefill)},
                   {"decode_tokens_per_s", median(decode)}};
  if (!attention_share.empty())
    j["prefill_time_share"] = {{"attention", median(attention_share)},
                               {"matmul", median(matmul_share)},
                               {"other", 1.0 - median(attention_share) - median(matmul_share)}};
  return j;
}

// Where the time of the decode steps that ran a full batch went (no prefill in the step): the
// mean step, and its shares in attention, the output (vocabulary) matmul, the other weight
// matmuls, the rest of forward() (norms, RoPE, activations, K/V stores) and outside forward()
// (scheduling, block tables, sampling).
struct FullDecodeSteps {
  int64_t steps = 0;
  double step_s = 0, forward_s = 0, attention_s = 0, matmul_s = 0, output_s = 0;
  void add(double s, const CpuBackend::PhaseTimes& a, const CpuBackend::PhaseTimes& b) {
    ++steps;
    step_s += s;
    forward_s += b.forward_s - a.forward_s;
    attention_s += b.attention_s - a.attention_s;
    matmul_s += b.matmul_s - a.matmul_s;
    output_s += b.output_s - a.output_s;
  }
  nlohmann::json json() const {
    return {{"steps", steps},
            {"mean_ms", 1e3 * step_s / static_cast<double>(steps)},
            {"share",
             {{"attention", attention_s / step_s},
              {"output_matmul", output_s / step_s},
              {"other_matmuls", (matmul_s - output_s) / step_s},
              {"rest_of_forward", (forward_s - attention_s - matmul_s) / step_s},
              {"outside_forward", (step_s - forward_s) / step_s}}}};
  }
};

// Total generated tokens/s of one fixed workload (`n_requests` requests, same prompt and output
// length each) with at most `batch` of them running together: the same work at every batch
// size, so the rows compare directly; what continuous batching buys over one at a time.
nlohmann::json bench_batch(const Args& a, std::shared_ptr<Model> m, int32_t batch, int32_t n_requests,
                           int32_t prompt_len, int32_t gen) {
  EngineConfig cfg = engine_config(a, *m);
  cfg.sched.max_running = batch;
  auto engine = std::make_unique<Engine>(m, make_backend(a, m), cfg);
  for (int32_t i = 0; i < n_requests; ++i) {
    Request req;
    req.prompt = random_prompt(prompt_len, m->config.n_vocab, 1000 + static_cast<uint64_t>(i));
    req.max_new_tokens = gen;
    req.ignore_eos = true;
    engine->submit(req);
  }
  auto* cpu = dynamic_cast<CpuBackend*>(&engine->backend());
  FullDecodeSteps full;
  const auto t0 = Clock::now();
  int32_t most_running = 0;
  for (bool more = true; more;) {
    const auto before = engine->latest_snapshot();
    const CpuBackend::PhaseTimes phases = cpu ? cpu->phase_times() : CpuBackend::PhaseTimes{};
    const auto ts = Clock::now();
    more = engine->step();
    const double step_s = std::chrono::duration<double>(Clock::now() - ts).count();
    const auto after = engine->latest_snapshot();
    most_running = std::max(most_running, after->running);
    const bool decode_only = before && after->counters.tokens_prefilled == before->counters.tokens_prefilled &&
                             after->counters.tokens_decoded == before->counters.tokens_decoded + batch;
    if (decode_only && cpu) full.add(step_s, phases, cpu->phase_times());
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto snap = engine->snapshot();
  nlohmann::json j{{"batch", batch},
                   {"requests", n_requests},
                   {"prompt_len", prompt_len},
                   {"gen", gen},
                   {"seconds", s},
                   {"generated_tokens", snap->counters.tokens_decoded},
                   {"tokens_per_s", static_cast<double>(snap->counters.tokens_decoded) / s},
                   {"most_running", most_running},
                   {"preemptions", snap->counters.preemptions}};
  if (full.steps > 0) j["decode_step"] = full.json();
  return j;
}

// Decode attention of one token over `ctx` positions, all layers' worth of heads: walking a
// shuffled block table (the paged path) vs a plain contiguous array (cpu/paging_probe.h). Same
// kernel, same data in the same KV dtype (--kv-dtype), same threads: the ratio is what paging costs.
nlohmann::json bench_paging_cost(const Args& a, std::shared_ptr<Model> m, int32_t ctx, int reps) {
  const int threads = static_cast<int>(a.i64("threads", 0));
  const int32_t bs = static_cast<int32_t>(a.i64("block-size", 16));
  const std::string dt_name = a.str("kv-dtype", "f32");
  const auto dt = parse_kv_dtype(dt_name);
  if (!dt) throw UsageError("--kv-dtype '" + dt_name + "' is not one of " + kv_dtype_choices());
  if (kv_dtype_packed(*dt))
    throw UsageError("--kv-dtype " + dt_name +
                     " is stored per tile and has no contiguous layout to compare with: "
                     "use --kv-dtypes int8," +
                     dt_name + " to time its paged decode against another dtype");
  PagingProbe probe(m, ctx, bs, *dt, threads);
  const std::string prefetch = a.str("kv-prefetch", "auto");
  if (prefetch == "always")
    probe.backend().set_prefetch_threshold(0);
  else if (prefetch == "never")
    probe.backend().set_prefetch_threshold(std::numeric_limits<int64_t>::max());
  else if (prefetch != "auto")
    throw UsageError("--kv-prefetch must be auto, always or never");
  // same: the contiguous reference prefetches by the same rule (its next chunk's rows), so the
  // ratio measures the addressing alone; hardware: it relies on the hardware prefetcher.
  const std::string contig_pf = a.str("contiguous-prefetch", "same");
  if (contig_pf != "same" && contig_pf != "hardware")
    throw UsageError("--contiguous-prefetch must be same or hardware");
  probe.set_contiguous_prefetch(contig_pf == "same");
  // pos-major: [pos][kv_head][head_dim], a pre-paging engine's per-layer cache; head-major:
  // [kv_head][pos][head_dim], each head's keys one dense stream (the best case for contiguous).
  const std::string contig_layout = a.str("contiguous-layout", "pos-major");
  if (contig_layout != "pos-major" && contig_layout != "head-major")
    throw UsageError("--contiguous-layout must be pos-major or head-major");
  probe.set_contiguous_head_major(contig_layout == "head-major");
  std::vector<float> out(static_cast<size_t>(probe.q_dim()));
  auto time_paged = [&] {
    const auto t0 = Clock::now();
    for (int32_t l = 0; l < probe.n_layer(); ++l) probe.paged(l, out.data());
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  };
  auto time_contiguous = [&] {
    const auto t0 = Clock::now();
    for (int32_t l = 0; l < probe.n_layer(); ++l) probe.contiguous(l, out.data());
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  };
  // Two cache conditions, because at a few thousand tokens a small model's KV fits in the L3
  // cache and the ratio then depends on what else ran: "hot" times each layout right after an
  // untimed run of the same layout (its K/V as cached as it can be), "cold" right after
  // sweeping a buffer twice the L3 size (K/V come from DRAM, as in an engine whose weights
  // stream through the cache between two decode steps). Repetitions are paired, the ratio is
  // taken per pair and its median and spread reported: machine noise moves both times of a
  // pair together.
  std::vector<uint8_t> sweep(size_t{64} << 20, 1);
  uint64_t sink = 0;
  auto evict_caches = [&] {
    for (size_t i = 0; i < sweep.size(); i += 64) sink += ++sweep[i];
  };
  auto measure = [&](bool cold) {
    std::vector<double> paged, contiguous, ratio;
    for (int r = 0; r <= reps; ++r) {  // r == 0 warms up
      cold ? evict_caches() : static_cast<void>(time_paged());
      const double p = time_paged();
      cold ? evict_caches() : static_cast<void>(time_contiguous());
      const double cc = time_contiguous();
      if (r == 0) continue;
      paged.push_back(p);
      contiguous.push_back(cc);
      ratio.push_back(p / cc);
    }
    std::sort(ratio.begin(), ratio.end());
    auto quantile = [&](double f) {
      return ratio[static_cast<size_t>(f * static_cast<double>(ratio.size() - 1) + 0.5)];
    };
    return nlohmann::json{{"paged_us", median(paged)},
                          {"contiguous_us", median(contiguous)},
                          {"paged_over_contiguous", quantile(0.5)},
                          {"ratio_p10", quantile(0.1)},
                          {"ratio_p90", quantile(0.9)}};
  };
  nlohmann::json row{{"context", ctx},
                     {"block_size", bs},
                     {"kv_dtype", dt_name},
                     {"reps", reps},
                     {"kv_prefetch", prefetch},
                     {"contiguous_prefetch", contig_pf},
                     {"contiguous_layout", contig_layout},
                     {"prefetch_threshold_bytes", probe.backend().prefetch_threshold()}};
  row["hot"] = measure(false);
  row["cold"] = measure(true);
  row["sweep_checksum"] = sink;  // keeps the sweep from being optimised away
  return row;
}

}  // namespace

int cmd_bench(int argc, char** argv, int first) {
  const Args a(argc, argv, first,
               with_engine_options({"prompt-len", "gen", "reps", "batches", "batch-prompt-len", "contexts",
                                    "kv-prefetch", "contiguous-prefetch", "contiguous-layout", "kv-dtypes"}),
               {"help", "no-single", "no-batch", "no-paging"});
  if (a.has("help")) {
    std::cout << "kvscope-cli bench [--model M] [--prompt-len 128] [--gen 64] [--reps 3] [--threads N]\n"
                 "  [--batches 1,4,16 --batch-prompt-len 32] [--contexts 1024,4096] [--kv-prefetch auto|always|never]\n"
                 "  [--contiguous-prefetch same|hardware] [--contiguous-layout pos-major|head-major]\n"
                 "  [--no-single] [--no-batch] [--no-paging]\n"
                 "  single: prefill/decode tokens/s of one sequence; batch: total tokens/s at each batch size\n"
                 "    (requests of --batch-prompt-len tokens) and where a full-batch decode step's time goes;\n"
                 "  paging: decode attention time, block table vs contiguous array, at each context length,\n"
                 "    with K/V in cache (hot) and from memory (cold); --kv-prefetch overrides when the paged\n"
                 "    path prefetches along the block table (auto: heads whose K/V exceed a quarter of the L2);\n"
                 "    the contiguous reference prefetches by the same rule unless --contiguous-prefetch hardware\n"
                 "  --kv-dtypes int8,kivi4,rot4: instead of paging, the paged decode attention step at each\n"
                 "    context in each dtype (the first is the baseline), alternating rounds, hot and cold\n";
    return 0;
  }
  LoadedModel lm = load_model(a);
  const int32_t prompt_len = static_cast<int32_t>(a.i64("prompt-len", 128));
  const int32_t gen = static_cast<int32_t>(a.i64("gen", 64));
  const int reps = static_cast<int>(a.i64("reps", 3));
  if (prompt_len < 1 || gen < 2 || reps < 1) throw UsageError("need --prompt-len >= 1, --gen >= 2, --reps >= 1");
  if (a.i64("max-batched-tokens", 512) < prompt_len)
    throw UsageError("--max-batched-tokens must be >= --prompt-len to time the prefill as one step");
  nlohmann::json j;
  j["model"] = lm.path;
  j["model_description"] = lm.model->describe();
  {
    auto probe = make_engine(a, lm.model);
    j["backend"] = probe->backend().name();
    j["kv_cache"] = probe->kv_summary();
  }
  if (!a.has("no-single")) {
    j["single"] = bench_single(a, lm.model, prompt_len, gen, reps);
    j["prefill_tokens_per_s"] = j["single"]["prefill_tokens_per_s"];
    j["decode_tokens_per_s"] = j["single"]["decode_tokens_per_s"];
  }
  auto int_list = [](const std::string& s) {
    std::vector<int32_t> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) v.push_back(static_cast<int32_t>(std::stol(item)));
    return v;
  };
  if (!a.has("no-batch")) {
    nlohmann::json rows = nlohmann::json::array();
    const std::vector<int32_t> batches = int_list(a.str("batches", "1,4,16"));
    const int32_t n_requests = batches.empty() ? 0 : *std::max_element(batches.begin(), batches.end());
    const auto batch_prompt = static_cast<int32_t>(a.i64("batch-prompt-len", 32));
    for (int32_t b : batches) rows.push_back(bench_batch(a, lm.model, b, n_requests, batch_prompt, gen));
    for (auto& r : rows)
      r["speedup_vs_first"] = r["tokens_per_s"].get<double>() / rows[0]["tokens_per_s"].get<double>();
    j["batch"] = rows;
  }
  if (a.has("kv-dtypes")) {
    std::vector<std::string> dtypes;
    std::stringstream ss(a.str("kv-dtypes", ""));
    for (std::string item; std::getline(ss, item, ',');) dtypes.push_back(item);
    nlohmann::json rows = nlohmann::json::array();
    for (int32_t ctx : int_list(a.str("contexts", "1024,4096")))
      rows.push_back(bench_kv_dtype_decode(a, lm.model, ctx, std::max(reps, 21), dtypes));
    j["kv_dtype_decode"] = rows;
  } else if (!a.has("no-paging")) {
    nlohmann::json rows = nlohmann::json::array();
    for (int32_t ctx : int_list(a.str("contexts", "1024,4096")))
      rows.push_back(bench_paging_cost(a, lm.model, ctx, std::max(reps, 21)));
    j["paging_cost"] = rows;
  }
  std::cout << j.dump(2) << "\n";
  return 0;
}

}  // namespace kvscope::cli
