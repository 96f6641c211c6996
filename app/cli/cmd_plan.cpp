// kvscope-cli plan: how much memory (weights + KV cache) a model needs at a context, batch,
// precision and KV dtype, with window/sinks and prefix sharing, and how many GPUs hold it.
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/plan_model_gguf.h"
#include "kv/kv_planner.h"

namespace kvscope::cli {

namespace {

// Token counts accept 32768 or 32K; 0 means "none" for the window, sinks and prefix.
int64_t tokens_option(const Args& a, const std::string& name) {
  const std::string v = a.str(name, "0");
  if (v == "0") return 0;
  const auto n = parse_token_count(v);
  if (!n) throw UsageError("--" + name + " '" + v + "' is not a token count (e.g. 4096 or 32K)");
  return *n;
}

// Both unit systems, because the problem statement mixes them (see kv/kv_planner.h).
std::string gb(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  const char* dec[] = {"B", "KB", "MB", "GB", "TB"};
  const char* bin[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && b >= 1e3 * std::pow(1e3, u)) ++u;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.2f %s (%.2f %s)", b / std::pow(1e3, u), dec[u], b / std::pow(1024.0, u), bin[u]);
  return buf;
}

}  // namespace

int cmd_plan(int argc, char** argv, int first) {
  const Args a(argc, argv, first,
               {"model", "preset", "context", "batch", "weights", "kv-dtype", "window", "sinks", "shared-prefix",
                "gpu-gib", "gpu-util"},
               {"mha", "json", "help"});
  if (a.has("help")) {
    std::cout << "kvscope-cli plan (--model M.gguf | --preset NAME) --context N[K] [--batch B] [--weights W]\n"
                 "  [--kv-dtype D] [--window W --sinks S] [--shared-prefix P] [--mha] [--gpu-gib 80] [--gpu-util 1]\n"
                 "  [--json]\n"
                 "presets:";
    for (const PlanModel& m : plan_presets()) std::cout << " " << m.name;
    std::cout << "\nweights: " << weight_choices() << " (default f16; a GGUF file without --weights: its own bytes)\n"
              << "kv-dtype: " << kv_dtype_choices() << " (default f16)\n"
              << "--mha counts every query head as a KV head (the formula that ignores grouped-query attention).\n"
              << "--context takes 131072, 128K (x1024) or 1M (x1048576).\n";
    return 0;
  }
  PlanInput in;
  if (a.has("model") == a.has("preset")) throw UsageError("name exactly one of --model M.gguf or --preset NAME");
  if (a.has("preset")) {
    const auto p = find_plan_preset(a.str("preset"));
    if (!p) {
      std::string names;
      for (const PlanModel& m : plan_presets()) names += " " + m.name;
      throw UsageError("unknown preset '" + a.str("preset") + "'; presets:" + names);
    }
    in.model = *p;
    in.weights = a.str("weights", "f16");
  } else {
    in.model = plan_model_from_gguf(a.str("model"));
    in.weights = a.str("weights", "");
  }
  const std::string ctx = a.str("context", std::to_string(in.model.n_ctx_train));
  const auto context = parse_token_count(ctx);
  if (!context) throw UsageError("--context '" + ctx + "' is not a token count (e.g. 131072 or 128K)");
  in.context = *context;
  in.batch = static_cast<int32_t>(a.i64("batch", 1));
  const std::string dt = a.str("kv-dtype", "f16");
  const auto parsed = parse_kv_dtype(dt);
  if (!parsed) throw UsageError("--kv-dtype '" + dt + "' is not one of " + kv_dtype_choices());
  in.kv_dtype = *parsed;
  in.window = static_cast<int32_t>(std::min<int64_t>(tokens_option(a, "window"), INT32_MAX));
  in.sinks = static_cast<int32_t>(std::min<int64_t>(tokens_option(a, "sinks"), INT32_MAX));
  in.shared_prefix = tokens_option(a, "shared-prefix");
  in.mha = a.has("mha");
  in.gpu_gib = a.f64("gpu-gib", 80.0);
  in.gpu_util = a.f64("gpu-util", 1.0);
  PlanResult r;
  try {
    r = plan_memory(in);
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }

  const PlanModel& m = in.model;
  if (a.has("json")) {
    nlohmann::json groups = nlohmann::json::array();
    for (const PlanGroup& g : r.groups)
      groups.push_back({{"kind", g.kind},
                        {"n_layer", g.n_layer},
                        {"window", g.window},
                        {"tokens_per_seq", g.tokens_per_seq},
                        {"tokens_stored", g.tokens_stored},
                        {"bytes", g.bytes}});
    nlohmann::json j = {{"model",
                         {{"name", m.name},
                          {"n_params", m.n_params},
                          {"n_layer", m.n_layer},
                          {"n_head", m.n_head},
                          {"n_head_kv", m.n_head_kv},
                          {"head_dim", m.head_dim},
                          {"sliding_window", m.sliding_window},
                          {"n_swa_layers", m.n_swa_layers},
                          {"n_expert", m.n_expert},
                          {"n_expert_used", m.n_expert_used},
                          {"n_active_params", m.n_expert > 0 ? m.n_active_params : m.n_params},
                          {"source", m.note}}},
                        {"context", in.context},
                        {"batch", in.batch},
                        {"weights", in.weights.empty() ? "file" : in.weights},
                        {"kv_dtype", kv_dtype_name(in.kv_dtype)},
                        {"window", in.window},
                        {"sinks", in.sinks},
                        {"shared_prefix", in.shared_prefix},
                        {"mha", in.mha},
                        {"kv_heads", r.kv_heads},
                        {"kv_bytes_per_token", r.kv_bytes_per_token},
                        {"kv_element_bytes_per_token", r.kv_element_bytes_per_token},
                        {"formula", r.formula},
                        {"weights_bytes", r.weights_bytes},
                        {"kv_bytes", r.kv_bytes},
                        {"kv_element_bytes", r.kv_element_bytes},
                        {"kv_scale_bytes", r.kv_scale_bytes},
                        {"total_bytes", r.total_bytes},
                        {"gpu_gib", in.gpu_gib},
                        {"gpu_util", in.gpu_util},
                        {"gpus", r.gpus},
                        {"groups", groups}};
    if (m.hybrid())
      j["recurrent"] = {{"layers", m.n_recurrent_layers},
                        {"state_bytes_per_layer", m.state_bytes_per_layer},
                        {"state_bytes_per_seq", r.state_bytes_per_seq},
                        {"state_bytes", r.state_bytes},
                        {"seqs_fit", r.seqs_fit},
                        {"seqs_fit_full_attention", r.seqs_fit_full_attention},
                        {"fit_gpus", r.fit_gpus},
                        {"break_even_tokens", r.break_even_tokens}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("model: %s (%.4g%s params, %d layers, %d heads, %d KV heads, head_dim %d)\n", m.name.c_str(),
              m.n_params >= 1e9 ? m.n_params / 1e9 : m.n_params / 1e6, m.n_params >= 1e9 ? "B" : "M", m.n_layer,
              m.n_head, m.n_head_kv, m.head_dim);
  if (m.latent())
    std::printf(
        "latent attention (MLA): the %d heads share one cached row of %d latent + %d RoPE values per token and "
        "layer (their decompressed keys and values, %d and %d wide, are never cached)\n",
        m.n_head, m.kv_lora_rank, m.head_dim - m.kv_lora_rank, m.mla_k_dim, m.mla_v_dim);
  if (m.n_expert > 0)
    std::printf(
        "MoE: %d experts, %d per token, %.4gB of the parameters active per token; the experts are in the FFN, "
        "so the KV per token below does not depend on them\n",
        m.n_expert, m.n_expert_used, m.n_active_params / 1e9);
  std::printf("KV per token: %s%s\n", r.formula.c_str(), in.mha ? "  [--mha: every head counted as a KV head]" : "");
  std::printf("context %lld x batch %d, KV %s, window %d, sinks %d, shared prefix %lld\n",
              static_cast<long long>(in.context), in.batch, kv_dtype_name(in.kv_dtype), in.window, in.sinks,
              static_cast<long long>(in.shared_prefix));
  for (const PlanGroup& g : r.groups)
    std::printf("  %-12s %3d layers: %lld tokens kept per sequence, %lld stored: %s\n", g.kind.c_str(), g.n_layer,
                static_cast<long long>(g.tokens_per_seq), static_cast<long long>(g.tokens_stored), gb(g.bytes).c_str());
  std::printf("weights (%s): %s\n", in.weights.empty() ? "as stored in the file" : in.weights.c_str(),
              gb(r.weights_bytes).c_str());
  std::printf("KV cache:      %s", gb(r.kv_bytes).c_str());
  if (r.kv_scale_bytes > 0)
    std::printf("  = elements %s + scales %s", gb(r.kv_element_bytes).c_str(), gb(r.kv_scale_bytes).c_str());
  if (m.hybrid())
    std::printf("\nrecurrent state: %s (%s per sequence, fixed: %d layers x %lld B)", gb(r.state_bytes).c_str(),
                gb(r.state_bytes_per_seq).c_str(), m.n_recurrent_layers,
                static_cast<long long>(m.state_bytes_per_layer));
  std::printf("\ntotal:         %s -> %d GPU(s) of %.0f GiB (%.0f%% usable); activations not counted\n",
              gb(r.total_bytes).c_str(), r.gpus, in.gpu_gib, in.gpu_util * 100);
  if (m.hybrid())
    std::printf(
        "%d GPU(s) beside the weights hold %lld sequences of %lld tokens; the same model with attention in all %d "
        "layers: %lld (the fixed state equals that KV at %lld tokens)\n",
        r.fit_gpus, static_cast<long long>(r.seqs_fit), static_cast<long long>(in.context), m.n_layer,
        static_cast<long long>(r.seqs_fit_full_attention), static_cast<long long>(r.break_even_tokens));
  return 0;
}

}  // namespace kvscope::cli
