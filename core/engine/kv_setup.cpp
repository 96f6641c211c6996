#include "engine/kv_setup.h"

#include <algorithm>
#include <stdexcept>

#include "engine/config_validation.h"
#include "kv/contiguous_kv_manager.h"
#include "kv/hybrid_kv_manager.h"
#include "kv/hybrid_pool_split.h"
#include "kv/kv_cache_manager.h"

namespace kvscope {

namespace {

// The layers of one kind that keep their own KV (a layer that borrows, gemma4's last ones, has none).
std::vector<int32_t> group_layers(const ModelConfig& mc, bool sliding) {
  std::vector<int32_t> out;
  for (int32_t il = 0; il < mc.n_layer; ++il)
    if (mc.layer_is_swa(il) == sliding && mc.layer_keeps_kv(il)) out.push_back(il);
  return out;
}

std::vector<int32_t> kv_layers(const ModelConfig& mc) {
  std::vector<int32_t> out;
  for (int32_t il = 0; il < mc.n_layer; ++il)
    if (mc.layer_keeps_kv(il)) out.push_back(il);
  return out;
}

// `layout` sized for these layers: their count, KV heads and head size. One pool stores one
// shape; "" when they share it, else why not.
std::string shape_layout(const ModelConfig& mc, const std::vector<int32_t>& layers, KvLayout& layout) {
  layout.n_layer = static_cast<int32_t>(layers.size());
  if (layers.empty()) return {};
  layout.n_head_kv = mc.layer_n_head_kv(layers[0]);
  layout.head_dim = mc.layer_head_dim(layers[0]);
  for (int32_t il : layers)
    if (mc.layer_n_head_kv(il) != layout.n_head_kv || mc.layer_head_dim(il) != layout.head_dim)
      return "layers " + std::to_string(layers[0]) + " and " + std::to_string(il) + " store K/V of different shapes (" +
             std::to_string(layout.n_head_kv) + " x " + std::to_string(layout.head_dim) + " and " +
             std::to_string(mc.layer_n_head_kv(il)) + " x " + std::to_string(mc.layer_head_dim(il)) +
             "), so the sliding and full layers need a pool each: use the hybrid KV cache (--hybrid-kv auto)";
  return {};
}

AttentionPolicy attention_policy(const EngineConfig& cfg) {
  return AttentionPolicy{cfg.window, cfg.sinks, cfg.sinks_in_sliding_layers, cfg.sched.max_model_len,
                         cfg.learned_sinks};
}

KvCacheConfig paged_config(const EngineConfig& cfg, int32_t num_blocks, int32_t window, int32_t sinks, uint64_t salt) {
  KvCacheConfig kc;
  kc.block_size = cfg.block_size;
  kc.num_blocks = num_blocks;
  kc.prefix_caching = cfg.prefix_caching;
  kc.sliding_window = cfg.evict.on() ? 0 : window;  // with eviction: the recent window, never dropped whole
  kc.sink_tokens = cfg.evict.on() ? 0 : sinks;
  kc.hash_salt = salt;
  kc.token_eviction = cfg.evict.on();
  // KIVI and rot4c: a block enters the prefix cache once quantized, and freed blocks drop their residual.
  kc.register_lag = kv_dtype_block_quantized(cfg.kv_dtype) ? cfg.kivi_residual : 0;
  kc.report_released = kv_dtype_block_quantized(cfg.kv_dtype);
  return kc;
}

// Two KV groups, global (full-attention) layers and sliding layers, each with its own pool.
KvSetup make_hybrid(const ModelConfig& mc, Backend& backend, EngineConfig& cfg, const KvLayout& layout, uint64_t salt) {
  KvSetup out;
  out.sliding_window = cfg.window > 0 ? std::min(cfg.window, mc.sliding_window) : mc.sliding_window;
  KvGroupSpec groups[2];
  for (int g = 0; g < 2; ++g) {
    groups[g].layers = group_layers(mc, g == 1);
    groups[g].layout = layout;
    if (const std::string why = shape_layout(mc, groups[g].layers, groups[g].layout); !why.empty())
      throw std::invalid_argument("the model's " + std::string(g == 1 ? "sliding" : "full-attention") + " " + why);
  }
  HybridPoolInput in;
  in.budget_bytes = cfg.kv_memory_bytes;
  in.global_blocks = cfg.num_blocks;
  in.sliding_blocks = cfg.sliding_num_blocks;
  in.global_block_bytes = groups[0].layout.bytes_per_block();
  in.sliding_block_bytes = groups[1].layout.bytes_per_block();
  in.block_size = cfg.block_size;
  in.window = out.sliding_window;
  in.sinks = cfg.sinks_in_sliding_layers ? cfg.sinks : 0;  // the sliding pool's sinks
  in.max_model_len = cfg.sched.max_model_len;
  in.max_chunk = cfg.sched.max_batched_tokens;
  in.max_running = cfg.sched.max_running;
  const HybridPoolSplit split = split_hybrid_pools(in);
  cfg.num_blocks = split.global_blocks;
  cfg.sliding_num_blocks = split.sliding_blocks;
  out.sliding_blocks_per_seq = split.sliding_blocks_per_seq;
  groups[0].layout.num_blocks = split.global_blocks;
  groups[1].layout.num_blocks = split.sliding_blocks;
  backend.init_kv_groups(groups, attention_policy(cfg));
  // Without sinks in the sliding layers their table keeps no sink blocks either.
  out.kv = std::make_unique<HybridKvManager>(
      paged_config(cfg, split.global_blocks, cfg.window, cfg.sinks, salt),
      paged_config(cfg, split.sliding_blocks, out.sliding_window, cfg.sinks_in_sliding_layers ? cfg.sinks : 0, salt));
  return out;
}

}  // namespace

std::string hybrid_unavailable_reason(const ModelConfig& mc, const EngineConfig& cfg, const Backend& backend) {
  int32_t n_sliding = 0, n_kv = 0;
  for (int32_t il = 0; il < mc.n_layer; ++il) {
    n_sliding += mc.layer_is_swa(il) && mc.layer_keeps_kv(il) ? 1 : 0;
    n_kv += mc.layer_keeps_kv(il) ? 1 : 0;
  }
  if (mc.sliding_window <= 0 || n_sliding == 0 || n_sliding == n_kv)
    return "the model does not mix sliding-window and global attention layers";
  if (cfg.contiguous_baseline) return "the contiguous baseline keeps one reservation per sequence";
  if (!backend.supports_kv_groups()) return "the " + backend.name() + " backend stores one KV group only";
  return {};
}

uint64_t kv_cache_salt(const std::string& model_path, KvDtype dtype, int32_t quant_group) {
  const std::string group =
      kv_dtype_packed(dtype) ? "|g" + std::to_string(kv_effective_group(quant_group, 1 << 30)) : "";
  return std::hash<std::string>{}(model_path + "|" + kv_dtype_name(dtype) + group);
}

namespace {

KvSetup build_kv_setup(const Model& model, Backend& backend, EngineConfig& cfg) {
  const ModelConfig& mc = model.config;
  if (const auto problems = blocking_problems(validate(cfg, mc)); !problems.empty())
    throw std::invalid_argument(describe_problems(problems));
  if (cfg.sched.max_model_len <= 0) cfg.sched.max_model_len = mc.n_ctx_train;
  if (cfg.no_kv_cache) cfg.prefix_caching = false;  // nothing may survive a step
  cfg.sched.recompute_every_token = cfg.no_kv_cache;

  KvLayout layout;
  layout.n_layer = mc.n_layer;
  layout.n_head_kv = mc.n_head_kv;
  layout.head_dim = mc.head_dim;
  layout.block_size = cfg.block_size;
  layout.dtype = cfg.kv_dtype;
  layout.quant_group = cfg.kv_quant_group;
  layout.kivi_residual = kv_dtype_block_quantized(cfg.kv_dtype) ? cfg.kivi_residual : 0;
  layout.latent = mc.latent_kv();
  if (layout.kivi_residual > 0 && !backend.supports_kivi_residual())
    throw std::invalid_argument(
        "the " + backend.name() +
        " backend keeps only the block being filled in f16 (no --kivi-residual): use --kivi-residual 0 or --backend cpu");
  const uint64_t salt = kv_cache_salt(model.file->path(), cfg.kv_dtype, cfg.kv_quant_group);

  if (cfg.evict.on() && !backend.supports_token_eviction())
    throw std::invalid_argument("the " + backend.name() +
                                " backend does not support token eviction (--evict): use --backend cpu");
  const std::string no_hybrid =
      cfg.evict.on() ? "token eviction runs on one KV group" : hybrid_unavailable_reason(mc, cfg, backend);
  if (cfg.hybrid_kv == HybridKvMode::On && !no_hybrid.empty())
    throw std::invalid_argument("the hybrid KV cache is not available: " + no_hybrid);
  if (cfg.hybrid_kv != HybridKvMode::Off && no_hybrid.empty()) return make_hybrid(mc, backend, cfg, layout, salt);
  cfg.sliding_num_blocks = 0;
  if (const std::string why = shape_layout(mc, kv_layers(mc), layout); !why.empty())
    throw std::invalid_argument("one KV pool cannot hold this model: " + why +
                                (no_hybrid.empty() ? "" : "; the hybrid KV cache is not available: " + no_hybrid));

  if (cfg.num_blocks <= 0)
    cfg.num_blocks = static_cast<int32_t>(std::min<int64_t>(cfg.kv_memory_bytes / layout.bytes_per_block(), 1 << 30));
  if (cfg.num_blocks <= 0)
    throw std::invalid_argument("KV memory budget is smaller than one block (" +
                                std::to_string(layout.bytes_per_block()) + " bytes)");
  layout.num_blocks = cfg.num_blocks;
  // One KV group: the backend itself must tell the layer kinds apart for global-only sinks.
  if (!cfg.sinks_in_sliding_layers && cfg.sinks > 0 && !backend.supports_kv_groups())
    throw std::invalid_argument("sinks in the full-attention layers only need the CPU backend (" + backend.name() +
                                " applies sinks to every layer)");
  // With eviction the window and sinks are the evictor's (engine/token_eviction.h): every kept
  // token is visible, at its absolute position.
  AttentionPolicy policy = attention_policy(cfg);
  if (cfg.evict.on()) policy = AttentionPolicy{0, 0, true, policy.context_len, policy.learned_sinks};
  backend.init_kv(layout, policy);

  KvSetup out;
  if (cfg.contiguous_baseline) {
    // Reservations are whole blocks (unit = block size), so every base is block-aligned and the
    // backend walks a (consecutive) block table exactly as for the paged manager, and K/V
    // copies (forks, relocations) come out as block copies.
    out.kv = std::make_unique<ContiguousKvManager>(static_cast<int64_t>(cfg.num_blocks) * cfg.block_size,
                                                   cfg.sched.max_model_len, cfg.baseline_reserve, cfg.block_size);
  } else {
    KvCacheConfig kc = paged_config(cfg, cfg.num_blocks, cfg.window, cfg.sinks, salt);
    if (cfg.evict.per_layer()) kc.hole_layers = mc.n_layer;  // one hole mask per layer
    out.kv = std::make_unique<KvCacheManager>(kc);
  }
  return out;
}

}  // namespace

KvSetup make_kv_setup(const Model& model, Backend& backend, EngineConfig& cfg) {
  const ModelConfig& mc = model.config;
  const bool recurrent = mc.has_recurrent();
  // A prefix-cache hit skips tokens whose recurrent state the sequence's slot never saw: hits
  // need a checkpoint of that state (kv/state_checkpoint_pool.h), else none at all.
  const int64_t per_slot = mc.state_floats_per_seq() * state_elem_bytes(cfg.state_dtype);
  const int64_t n_checkpoints =
      cfg.state_checkpoints.kind == CheckpointPolicy::Kind::Off || per_slot <= 0 || cfg.contiguous_baseline
          ? 0
          : std::min<int64_t>(cfg.checkpoint_memory_bytes / per_slot, 1 << 16);
  if (recurrent && n_checkpoints == 0) cfg.prefix_caching = false;
  KvSetup out = build_kv_setup(model, backend, cfg);
  if (!recurrent) return out;
  // A slot per running sequence, and a few for the sequences n > 1 forks add beside them.
  StateSlotConfig sc;
  sc.n_slots = std::max(1, cfg.sched.max_running) + 8;
  sc.n_checkpoints = cfg.prefix_caching ? static_cast<int32_t>(n_checkpoints) : 0;
  sc.block_size = cfg.block_size;
  sc.policy = cfg.state_checkpoints;
  sc.hash_salt = kv_cache_salt(model.file->path(), cfg.kv_dtype, cfg.kv_quant_group);
  backend.init_state_slots(sc.n_slots + sc.n_checkpoints, cfg.state_dtype);
  auto slots = std::make_unique<StateSlotManager>(std::move(out.kv), sc);
  out.state_slots = slots.get();
  out.kv = std::move(slots);
  return out;
}

}  // namespace kvscope
