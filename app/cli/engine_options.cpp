#include "cli/engine_options.h"

#include <iostream>

#include "backend_factory.h"
#include "engine/config_validation.h"
#include "model/model_locator.h"

namespace kvscope::cli {

const std::set<std::string>& engine_option_names() {
  static const std::set<std::string> names = {"model",
                                              "threads",
                                              "block-size",
                                              "kv-blocks",
                                              "kv-memory",
                                              "kv-dtype",
                                              "kv-group",
                                              "kivi-residual",
                                              "prefix-caching",
                                              "window",
                                              "sinks",
                                              "learned-sinks",
                                              "max-running",
                                              "max-batched-tokens",
                                              "max-model-len",
                                              "temp",
                                              "top-k",
                                              "top-p",
                                              "min-p",
                                              "repeat-penalty",
                                              "repeat-last-n",
                                              "seed",
                                              "backend",
                                              "kv-cache",
                                              "hybrid-kv",
                                              "snapshots",
                                              "evict",
                                              "state-dtype",
                                              "state-checkpoints",
                                              "checkpoint-memory"};
  return names;
}

std::set<std::string> with_engine_options(std::set<std::string> extra) {
  extra.insert(engine_option_names().begin(), engine_option_names().end());
  return extra;
}

LoadedModel load_model(const Args& a) {
  const ModelChoice choice = resolve_model(a.str("model"));
  if (!choice.note.empty()) std::cerr << "kvscope: " << choice.note << "\n";
  LoadedModel lm;
  lm.path = choice.path;
  lm.note = choice.note;
  lm.model = Model::load(choice.path);
  return lm;
}

SamplingParams sampling_params(const Args& a, const SamplingParams& d) {
  SamplingParams p;
  p.temperature = static_cast<float>(a.f64("temp", d.temperature));
  p.top_k = static_cast<int32_t>(a.i64("top-k", d.top_k));
  p.top_p = static_cast<float>(a.f64("top-p", d.top_p));
  p.min_p = static_cast<float>(a.f64("min-p", d.min_p));
  p.repetition_penalty = static_cast<float>(a.f64("repeat-penalty", d.repetition_penalty));
  p.repetition_last_n = static_cast<int32_t>(a.i64("repeat-last-n", d.repetition_last_n));
  p.seed = static_cast<uint64_t>(a.i64("seed", static_cast<int64_t>(d.seed)));
  if (p.temperature < 0) throw UsageError("--temp must be >= 0");
  if (p.top_k < 0) throw UsageError("--top-k must be >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) throw UsageError("--top-p must be in (0, 1]");
  if (p.min_p < 0.0f || p.min_p > 1.0f) throw UsageError("--min-p must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f)) throw UsageError("--repeat-penalty must be > 0");
  return p;
}

EngineConfig engine_config(const Args& a, const Model& m) {
  EngineConfig c;
  c.block_size = static_cast<int32_t>(a.i64("block-size", 16));
  c.num_blocks = static_cast<int32_t>(a.i64("kv-blocks", 0));
  const double mib = a.f64("kv-memory", 0.0);
  if (c.num_blocks < 0) throw UsageError("--kv-blocks must be positive");
  if (mib < 0) throw UsageError("--kv-memory must be positive");
  if (c.num_blocks == 0) {
    // Default pool: room for 8 sequences at full context, capped at 1 GiB.
    const int64_t per_token = 2LL * m.config.n_layer * m.config.n_head_kv * m.config.head_dim * 4;
    const int64_t want = std::min<int64_t>(per_token * 8 * std::min(m.config.n_ctx_train, 4096), 1LL << 30);
    c.kv_memory_bytes = mib > 0 ? static_cast<int64_t>(mib * (1 << 20)) : want;
  }
  const std::string dt = a.str("kv-dtype", "f32");
  auto parsed = parse_kv_dtype(dt);
  if (!parsed) throw UsageError("--kv-dtype '" + dt + "' is not one of " + kv_dtype_choices());
  c.kv_dtype = *parsed;
  const std::string sd = a.str("state-dtype", "f32");
  const auto state = parse_state_dtype(sd);
  if (!state) throw UsageError("--state-dtype '" + sd + "' is not one of " + state_dtype_choices());
  c.state_dtype = *state;
  std::string why;
  if (!parse_checkpoint_policy(a.str("state-checkpoints", checkpoint_policy_name(c.state_checkpoints)),
                               c.state_checkpoints, why))
    throw UsageError("--state-checkpoints " + why);
  const double ckpt_mib = a.f64("checkpoint-memory", static_cast<double>(c.checkpoint_memory_bytes) / (1 << 20));
  if (!(ckpt_mib >= 0)) throw UsageError("--checkpoint-memory must be >= 0 MiB");
  c.checkpoint_memory_bytes = static_cast<int64_t>(ckpt_mib * (1 << 20));
  c.kv_quant_group = static_cast<int32_t>(a.i64("kv-group", 0));
  c.kivi_residual = static_cast<int32_t>(a.i64("kivi-residual", 0));  // validate() explains a bad value
  const std::string pc = a.str("prefix-caching", "on");
  if (pc != "on" && pc != "off") throw UsageError("--prefix-caching takes on or off");
  c.prefix_caching = pc == "on";
  c.window = static_cast<int32_t>(a.i64("window", 0));
  c.sinks = static_cast<int32_t>(a.i64("sinks", 0));
  const std::string ls = a.str("learned-sinks", "on");
  if (ls != "on" && ls != "off") throw UsageError("--learned-sinks takes on or off (off: drop gpt-oss's attn_sinks)");
  c.learned_sinks = ls == "on";
  try {
    c.evict = parse_evict(a.str("evict", "off"));
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  c.sched.max_running = static_cast<int32_t>(a.i64("max-running", 64));
  c.sched.max_batched_tokens = static_cast<int32_t>(a.i64("max-batched-tokens", 512));
  c.sched.max_model_len = static_cast<int32_t>(a.i64("max-model-len", 0));
  const std::string kvc = a.str("kv-cache", "on");
  if (kvc != "on" && kvc != "off") throw UsageError("--kv-cache takes on or off (off: recompute everything each step)");
  c.no_kv_cache = kvc == "off";
  // auto: on for a model mixing sliding-window and global layers (Gemma 3) when it can be.
  const std::string hk = a.str("hybrid-kv", "auto");
  if (hk != "auto" && hk != "on" && hk != "off")
    throw UsageError("--hybrid-kv takes auto, on or off (on: separate block tables for sliding and global layers)");
  c.hybrid_kv = hk == "on" ? HybridKvMode::On : hk == "off" ? HybridKvMode::Off : HybridKvMode::Auto;
  const std::string sn = a.str("snapshots", "every-step");
  if (sn != "every-step" && sn != "on-demand")
    throw UsageError("--snapshots takes every-step (publish one after each step) or on-demand");
  c.publish_every_step = sn == "every-step";
  // The engine's own rule book (engine/config_validation.h): refuse what it would refuse, and
  // say what it would run but is almost surely a mistake.
  const std::vector<ConfigProblem> problems = validate(c, m.config);
  for (const ConfigProblem& q : problems)
    if (q.advisory) std::cerr << "warning: " << q.message << "\n";
  if (const auto blocking = blocking_problems(problems); !blocking.empty())
    throw UsageError(describe_problems(blocking));
  return c;
}

std::unique_ptr<Backend> make_backend(const Args& a, std::shared_ptr<Model> m) {
  const int threads = static_cast<int>(a.i64("threads", 0));
  if (threads < 0) throw UsageError("--threads must be >= 0 (0: all cores)");
  const auto kind = parse_backend_kind(a.str("backend", "auto"));
  if (!kind) throw UsageError("--backend takes auto, cpu or cuda");
  if (std::string why; *kind == BackendKind::Cuda && !cuda_backend_usable(&why))
    throw UsageError("--backend cuda: " + why);
  return kvscope::make_backend(*kind, std::move(m), threads);
}

std::unique_ptr<Engine> make_engine(const Args& a, std::shared_ptr<Model> m) {
  EngineConfig cfg = engine_config(a, *m);
  auto backend = make_backend(a, m);
  try {
    return std::make_unique<Engine>(m, std::move(backend), cfg);
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
}

}  // namespace kvscope::cli
