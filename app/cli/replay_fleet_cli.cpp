#include "cli/replay_fleet_cli.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/plan_model_gguf.h"
#include "kv/kv_planner.h"
#include "run/replay_fleet.h"
#include "run/timed_replay.h"

namespace kvscope::cli {

const char* kReplayFleetHelp =
    "  Fleets and tiers (untimed unless --timed):\n"
    "  --instances N --router round-robin|least-loaded|prefix-aware: N instances, each with the pool of\n"
    "     --capacity-tokens (one value) or --tiers; also replays one pooled cache of the fleet's total size\n"
    "  --tiers gpu=T,cpu=T: per instance, a GPU pool of T tokens and a CPU tier that keeps what it evicts\n"
    "  --timed: arrivals at the trace's timestamps under the engine's scheduler, steps timed by a roofline:\n"
    "     --hardware H100|H200|A100|cpu (default H100; cpu: --cpu-bench BENCH.json of kvscope-cli bench on --model)\n"
    "     --preset NAME | --model GGUF (the geometry; see kvscope-cli plan --list) [--weights bf16] [--kv-dtype f16]\n"
    "     [--tp 1] [--mfu 0.5] [--mbu 0.8] [--step-overhead-ms 0.5] [--max-running 256] [--max-batched-tokens 8192]\n";

std::set<std::string> replay_fleet_options() {
  return {"instances",         "router",   "tiers", "hardware", "cpu-bench", "preset",           "model",
          "weights",           "kv-dtype", "tp",    "mfu",      "mbu",       "step-overhead-ms", "max-running",
          "max-batched-tokens"};
}
std::set<std::string> replay_fleet_flags() { return {"timed"}; }

bool replay_wants_fleet(const Args& a) { return a.has("instances") || a.has("tiers") || a.has("timed"); }

namespace {

int64_t tokens_value(const std::string& what, const std::string& v) {
  if (v == "0") return 0;
  const auto n = parse_token_count(v);
  if (!n) throw UsageError(what + " '" + v + "' is not a token count (e.g. 0, 65536 or 4M)");
  return *n;
}

// --tiers gpu=T,cpu=T (either may be missing: gpu from --capacity-tokens, cpu 0).
void parse_tiers(const Args& a, FleetOptions& f) {
  const std::string caps = a.str("capacity-tokens", "0");
  if (caps.find(',') != std::string::npos)
    throw UsageError("--instances, --tiers and --timed take one --capacity-tokens value");
  f.gpu_tokens = tokens_value("--capacity-tokens", caps);
  if (!a.has("tiers")) return;
  std::stringstream ss(a.str("tiers"));
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t eq = item.find('=');
    const std::string k = item.substr(0, eq), v = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (k == "gpu")
      f.gpu_tokens = tokens_value("--tiers gpu", v);
    else if (k == "cpu")
      f.cpu_tokens = tokens_value("--tiers cpu", v);
    else
      throw UsageError("--tiers '" + item + "': expected gpu=TOKENS or cpu=TOKENS");
  }
}

FleetOptions fleet_options(const Args& a) {
  FleetOptions f;
  const int64_t n = a.i64("instances", 1);
  if (n < 1 || n > 4096) throw UsageError("--instances must be in 1..4096");
  f.instances = static_cast<int32_t>(n);
  const auto r = parse_router(a.str("router", "round-robin"));
  if (!r) throw UsageError("--router must be round-robin, least-loaded or prefix-aware");
  f.router = *r;
  parse_tiers(a, f);
  return f;
}

double json_number(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || !j[key].is_number()) throw UsageError(file + " has no number \"" + key + "\"");
  return j[key].get<double>();
}

CostModel cost_model(const Args& a) {
  if (a.has("preset") == a.has("model"))
    throw UsageError("--timed needs the model geometry: --preset NAME or --model GGUF");
  PlanModel m;
  if (a.has("preset")) {
    const auto p = find_plan_preset(a.str("preset"));
    if (!p) throw UsageError("unknown --preset '" + a.str("preset") + "' (kvscope-cli plan --list)");
    m = *p;
  } else {
    m = plan_model_from_gguf(a.str("model"));
  }
  double bits = 0;
  if (a.has("weights") || a.has("preset")) {
    const auto b = weight_bits(a.str("weights", "bf16"));
    if (!b) throw UsageError("--weights must be one of " + std::string(weight_choices()));
    bits = *b;
  }
  const auto kv = parse_kv_dtype(a.str("kv-dtype", "f16"));
  if (!kv) throw UsageError("--kv-dtype '" + a.str("kv-dtype") + "' is not one of " + kv_dtype_choices());
  const std::string hw_name = a.str("hardware", "H100");
  HardwareProfile hw;
  if (hw_name == "cpu") {
    if (!a.has("cpu-bench") || !a.has("model"))
      throw UsageError("--hardware cpu needs --cpu-bench BENCH.json and --model");
    std::ifstream f(a.str("cpu-bench"));
    nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (!f || j.is_discarded()) throw UsageError("cannot read JSON from '" + a.str("cpu-bench") + "'");
    hw = measured_cpu_profile(static_cast<double>(m.file_weight_bytes), m.n_params,
                              json_number(j, "prefill_tokens_per_s", a.str("cpu-bench")),
                              json_number(j, "decode_tokens_per_s", a.str("cpu-bench")));
  } else {
    const auto p = find_hardware_profile(hw_name);
    if (!p) throw UsageError("--hardware must be one of " + std::string(hardware_profile_names()) + " or cpu");
    hw = *p;
  }
  CostModel c = make_cost_model(m, bits, *kv, hw);
  c.mfu = a.f64("mfu", c.mfu);
  c.mbu = a.f64("mbu", c.mbu);
  c.step_overhead_s = a.f64("step-overhead-ms", c.step_overhead_s * 1e3) / 1e3;
  const int64_t tp = a.i64("tp", 1);
  if (tp < 1 || tp > 64) throw UsageError("--tp must be in 1..64");
  c.tensor_parallel = static_cast<int32_t>(tp);
  try {
    c.check();
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  return c;
}

nlohmann::json stats_json(const InstanceStats& s) {
  return {
      {"requests", s.requests},     {"pool_blocks", s.pool_blocks},       {"prompt_tokens", s.prompt_tokens},
      {"hit_ratio", s.hit_ratio()}, {"gpu_hit_tokens", s.gpu_hit_tokens}, {"cpu_hit_tokens", s.cpu_hit_tokens},
      {"evictions", s.evictions},   {"cpu_evictions", s.cpu_evictions},   {"truncated_requests", s.truncated_requests}};
}

nlohmann::json fleet_json(const FleetOptions& f, const FleetResult& r) {
  nlohmann::json j = {{"instances", f.instances},     {"router", router_name(f.router)},
                      {"gpu_tokens", f.gpu_tokens},   {"cpu_tokens", f.cpu_tokens},
                      {"total", stats_json(r.total)}, {"per_instance", nlohmann::json::array()}};
  for (const InstanceStats& s : r.instances) j["per_instance"].push_back(stats_json(s));
  return j;
}

void print_stats_table(const std::vector<InstanceStats>& rows, const InstanceStats& total) {
  std::printf("%9s %9s %10s %14s %14s %12s\n", "instance", "requests", "hit_ratio", "gpu_hit_tokens", "cpu_hit_tokens",
              "evictions");
  auto row = [](const char* name, const InstanceStats& s) {
    std::printf("%9s %9lld %10.4f %14llu %14llu %12llu\n", name, static_cast<long long>(s.requests), s.hit_ratio(),
                static_cast<unsigned long long>(s.gpu_hit_tokens), static_cast<unsigned long long>(s.cpu_hit_tokens),
                static_cast<unsigned long long>(s.evictions));
  };
  for (size_t i = 0; i < rows.size(); ++i) row(std::to_string(i).c_str(), rows[i]);
  row("all", total);
}

nlohmann::json percentiles_json(const Percentiles& p) {
  return {{"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}};
}

nlohmann::json timed_json(const TimedResult& r, const CostModel& c) {
  nlohmann::json inst = nlohmann::json::array();
  for (const TimedInstanceStats& s : r.instances) {
    nlohmann::json j = stats_json(s.cache);
    j["preemptions"] = s.preemptions;
    j["rejected"] = s.rejected;
    j["steps"] = s.steps;
    j["busy_s"] = s.busy_s;
    j["transfer_s"] = s.transfer_s;
    inst.push_back(j);
  }
  nlohmann::json pool = nlohmann::json::array();
  for (const PoolSample& p : r.pool)
    pool.push_back({{"t", p.t}, {"used", p.used}, {"running", p.running}, {"waiting", p.waiting}});
  return {{"hardware", c.hw.name},
          {"hardware_note", c.hw.note},
          {"tensor_parallel", c.tensor_parallel},
          {"mfu", c.mfu},
          {"mbu", c.mbu},
          {"step_overhead_s", c.step_overhead_s},
          {"weight_bytes", c.weight_bytes},
          {"active_params", c.active_params},
          {"kv_bytes_per_token", c.kv_bytes_per_token},
          {"finished", r.finished},
          {"rejected", r.total.rejected},
          {"preemptions", r.total.preemptions},
          {"makespan_s", r.makespan_s},
          {"ttft_s", percentiles_json(r.ttft_s)},
          {"queue_s", percentiles_json(r.queue_s)},
          {"tpot_s", percentiles_json(r.tpot_s)},
          {"e2e_s", percentiles_json(r.e2e_s)},
          {"per_instance", inst},
          {"pool_use", pool}};
}

void print_timed(const TimedResult& r, const CostModel& c) {
  std::printf("timed on %s x%d (mfu %.2f, mbu %.2f): %lld finished, %lld rejected, %llu preemptions, makespan %.1f s\n",
              c.hw.name.c_str(), c.tensor_parallel, c.mfu, c.mbu, static_cast<long long>(r.finished),
              static_cast<long long>(r.total.rejected), static_cast<unsigned long long>(r.total.preemptions),
              r.makespan_s);
  auto line = [](const char* what, const Percentiles& p) {
    std::printf("  %-6s mean %9.3f  p50 %9.3f  p90 %9.3f  p99 %9.3f  max %9.3f s\n", what, p.mean, p.p50, p.p90, p.p99,
                p.max);
  };
  line("TTFT", r.ttft_s);
  line("queue", r.queue_s);
  line("TPOT", r.tpot_s);
  line("e2e", r.e2e_s);
  for (size_t i = 0; i < r.instances.size(); ++i) {
    const TimedInstanceStats& s = r.instances[i];
    std::printf("  instance %zu: busy %.1f%% of the makespan, %lld steps, %llu preemptions, %.1f s of CPU-tier loads\n",
                i, r.makespan_s > 0 ? 100.0 * s.busy_s / r.makespan_s : 0.0, static_cast<long long>(s.steps),
                static_cast<unsigned long long>(s.preemptions), s.transfer_s);
  }
}

}  // namespace

void run_replay_fleet(const Args& a, std::span<const TraceRequest> reqs, const ReplayOptions& opt,
                      nlohmann::json& out) {
  const FleetOptions f = fleet_options(a);
  std::printf("%d instance(s), router %s, GPU %lld tokens each%s, CPU tier %lld tokens each, block size %d\n",
              f.instances, router_name(f.router), static_cast<long long>(f.gpu_tokens),
              f.gpu_tokens == 0 ? " (unbounded)" : "", static_cast<long long>(f.cpu_tokens), opt.block_size);
  FleetResult fleet;
  if (a.has("timed")) {
    const CostModel c = cost_model(a);
    TimedOptions t;
    t.cost = c;
    t.max_running = static_cast<int32_t>(a.i64("max-running", t.max_running));
    t.max_batched_tokens = static_cast<int32_t>(a.i64("max-batched-tokens", t.max_batched_tokens));
    TimedResult r;
    try {
      r = timed_replay(reqs, f, opt, t);
    } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
    for (const TimedInstanceStats& s : r.instances) fleet.instances.push_back(s.cache);
    fleet.total = r.total.cache;
    print_timed(r, c);
    out["timed"] = timed_json(r, c);
  } else {
    try {
      fleet = replay_fleet(reqs, f, opt);
    } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  }
  print_stats_table(fleet.instances, fleet.total);
  out["fleet"] = fleet_json(f, fleet);
  // The same total memory as one shared cache (untimed): what splitting it costs.
  FleetOptions pooled;
  pooled.gpu_tokens = f.gpu_tokens * f.instances;
  pooled.cpu_tokens = f.cpu_tokens * f.instances;
  const FleetResult one = replay_fleet(reqs, pooled, opt);
  std::printf("pooled (one cache of the fleet's total, untimed): hit ratio %.4f\n", one.total.hit_ratio());
  out["pooled"] = fleet_json(pooled, one);
  if (f.cpu_tokens > 0) {
    FleetOptions flat;
    flat.instances = f.instances;
    flat.router = f.router;
    flat.gpu_tokens = f.gpu_tokens == 0 ? 0 : f.gpu_tokens + f.cpu_tokens;
    const FleetResult g = replay_fleet(reqs, flat, opt);
    std::printf("one tier of GPU + CPU tokens per instance (untimed): hit ratio %.4f\n", g.total.hit_ratio());
    out["single_tier"] = fleet_json(flat, g);
  }
}

}  // namespace kvscope::cli
