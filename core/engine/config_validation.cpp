#include "engine/config_validation.h"

#include "kv/kv_layout.h"

namespace kvscope {

namespace {

struct Problems {
  std::vector<ConfigProblem> list;
  void add(const char* field, std::string message) { list.push_back({field, std::move(message), false}); }
  void advise(const char* field, std::string message) { list.push_back({field, std::move(message), true}); }
};

void check_pool(const EngineConfig& c, Problems& p) {
  if (c.num_blocks < 0)
    p.add("num_blocks", "the KV pool needs a positive number of blocks");
  else if (c.num_blocks == 1)
    p.advise("num_blocks", "a KV pool of 1 block: no sequence could ever grow past one block (at least 2)");
  if (c.num_blocks == 0 && c.kv_memory_bytes <= 0)
    p.add("kv_memory_bytes", "KV pool size must be positive (blocks or bytes)");
  if (c.sliding_num_blocks < 0)
    p.add("sliding_num_blocks", "the sliding pool needs a positive number of blocks (0: derived)");
}

void check_window(const EngineConfig& c, Problems& p) {
  if (c.window < 0) p.add("window", "the sliding window must not be negative (0 = full attention)");
  if (c.sinks < 0) p.add("sinks", "attention sinks must not be negative (0 = none)");
  if (c.window > 0 && is_supported_block_size(c.block_size) && c.window < c.block_size)
    p.advise("window", "sliding window " + std::to_string(c.window) + " is smaller than one block (" +
                           std::to_string(c.block_size) + " tokens): use 0 (off) or at least " +
                           std::to_string(c.block_size));
  if (c.sinks > 0 && c.window == 0 && !c.evict.on())
    p.add("sinks", "attention sinks need a sliding window (set a window, or sinks to 0)");
  if (c.sinks > 0 && c.window > 0 && c.sinks >= c.window)
    p.add("sinks", "sinks (" + std::to_string(c.sinks) + ") must be fewer than the window (" +
                       std::to_string(c.window) + ") tokens");
}

void check_scheduler(const EngineConfig& c, Problems& p) {
  if (c.sched.max_running <= 0) p.add("max_running", "max running sequences must be at least 1");
  if (c.sched.max_batched_tokens <= 0) p.add("max_batched_tokens", "max batched tokens must be at least 1");
  if (c.sched.max_model_len < 0)
    p.add("max_model_len", "max model length must not be negative (0 = the model's context)");
  if (c.sched.max_model_len > 0 && is_supported_block_size(c.block_size) && c.sched.max_model_len < c.block_size)
    p.advise("max_model_len", "max model length " + std::to_string(c.sched.max_model_len) +
                                  " is shorter than one block (" + std::to_string(c.block_size) + " tokens)");
}

void check_modes(const EngineConfig& c, Problems& p) {
  if (c.no_kv_cache && c.contiguous_baseline)
    p.add("no_kv_cache", "the no-KV-cache teaching mode runs on the paged allocator only");
  if (!c.contiguous_baseline) return;
  if (c.window > 0) p.add("window", "the contiguous baseline has no sliding window: set the window to 0 or use paging");
  if (c.hybrid_kv == HybridKvMode::On)
    p.add("hybrid_kv",
          "the hybrid KV cache is not available: the contiguous baseline keeps one reservation per sequence");
  const BaselineReserve& r = c.baseline_reserve;
  if (r.kind == BaselineReserveKind::Fixed && r.fixed_slots <= 0)
    p.add("baseline_reserve", "the baseline's fixed reservation must be at least 1 slot");
  // Only an explicit max length: with 0 the engine takes the model's context (checked there).
  const int64_t max_len = c.sched.max_model_len;
  const int64_t pool_tokens = static_cast<int64_t>(c.num_blocks) * c.block_size;
  if (r.kind == BaselineReserveKind::MaxModelLen && c.num_blocks > 0 && max_len > 0 && pool_tokens < max_len)
    p.advise("baseline_reserve",
             "the contiguous baseline reserves the max model length (" + std::to_string(max_len) +
                 " tokens) for every request, but the pool holds only " + std::to_string(pool_tokens) +
                 " tokens: no request could ever start (enlarge the pool or shorten the max length)");
}

// Token eviction: the budget, its windows, and what it cannot run with.
void check_evict(const EngineConfig& c, const ModelConfig& model, Problems& p) {
  const EvictConfig& e = c.evict;
  if (!e.on()) return;
  if (e.budget_pct <= 0 && e.budget <= 0)
    p.add("evict", "the eviction budget must be at least 1 token (or a percentage > 0)");
  if (e.budget_pct > 100) p.add("evict", "a percentage eviction budget must be at most 100%");
  const int64_t ctx = c.sched.max_model_len > 0 ? c.sched.max_model_len : model.n_ctx_train;
  if (e.budget_pct <= 0 && ctx > 0 && e.budget > ctx)
    p.add("evict", "the eviction budget (" + std::to_string(e.budget) + " tokens) is larger than the context (" +
                       std::to_string(ctx) + " tokens): nothing would ever be evicted");
  if (e.budget_pct <= 0 && e.budget > 0) {
    // The recent window: the spec's, else --window, else the policy's default for this budget.
    const int32_t recent = e.recent >= 0 ? e.recent : (c.window > 0 ? c.window : e.recent_for(e.budget));
    if (c.sinks + recent >= e.budget)
      p.add("evict", "sinks (" + std::to_string(c.sinks) + ") plus the recent window (" + std::to_string(recent) +
                         ") must be smaller than the eviction budget (" + std::to_string(e.budget) + ")");
  }
  if (!(e.compact_at > 0) || e.compact_at > 1)
    p.add("evict", "the compaction threshold must be in (0, 1] (1: never compact)");
  if (c.contiguous_baseline)
    p.add("evict", "token eviction needs the paged cache (holes inside blocks), not the contiguous baseline");
  if (c.no_kv_cache) p.add("evict", "token eviction needs a KV cache (the no-KV-cache mode keeps nothing to evict)");
  if (c.hybrid_kv == HybridKvMode::On)
    p.add("evict", "token eviction runs on one KV group: use --hybrid-kv off (or auto)");
  if (kv_dtype_block_quantized(c.kv_dtype))
    p.add("evict", std::string("token eviction cannot move single slots of ") + kv_dtype_name(c.kv_dtype) +
                       " blocks (keys quantized per block): use another --kv-dtype");
}

// KIVI's residual R: a setting of the block-quantized dtypes (kivi4, kivi2, rot4c), on the paged
// cache, shorter than the context.
void check_kivi_residual(const EngineConfig& c, const ModelConfig& model, Problems& p) {
  const int32_t R = c.kivi_residual;
  if (R < 0)
    return p.add("kivi_residual",
                 "the KIVI residual must be >= 0 tokens (0: only the block being filled stays in f16)");
  if (R == 0) return;
  if (!kv_dtype_block_quantized(c.kv_dtype))
    return p.add("kivi_residual",
                 std::string("the KIVI residual (") + std::to_string(R) +
                     " tokens) applies to --kv-dtype kivi4, kivi2 or rot4c only (formats quantized per block), not " +
                     kv_dtype_name(c.kv_dtype) + ": use --kivi-residual 0");
  const int64_t ctx = c.sched.max_model_len > 0 ? c.sched.max_model_len : model.n_ctx_train;
  if (ctx > 0 && R >= ctx)
    p.add("kivi_residual", "the KIVI residual (" + std::to_string(R) + " tokens) must be smaller than the context (" +
                               std::to_string(ctx) + " tokens): no block would ever be quantized");
  if (c.contiguous_baseline)
    p.add("kivi_residual", "the KIVI residual needs the paged cache, not the contiguous baseline");
}

}  // namespace

std::vector<ConfigProblem> validate(const EngineConfig& cfg, const ModelConfig& model) {
  Problems p;
  if (cfg.kv_quant_group < 0) p.add("kv_quant_group", "the KV quantization group must be >= 0 (0: the default)");
  // The packed KV dtypes' shape rules (a group that divides head_dim, rot4's power of two).
  // Every head size the pools store: head_dim, and the layers' own (gemma4's sliding layers).
  std::vector<int32_t> head_dims{model.head_dim};
  for (int32_t il = 0; il < model.n_layer; ++il)
    if (model.layer_keeps_kv(il) && model.layer_head_dim(il) != model.head_dim)
      head_dims.push_back(model.layer_head_dim(il));
  for (int32_t hd : head_dims)
    if (hd > 0 && cfg.kv_quant_group >= 0)
      if (std::string why = kv_format_problem(cfg.kv_dtype, hd, cfg.block_size, cfg.kv_quant_group); !why.empty()) {
        p.add("kv_dtype", std::move(why));
        break;
      }
  if (model.latent_kv() && kv_dtype_packed(cfg.kv_dtype)) p.add("kv_dtype", latent_packed_problem(cfg.kv_dtype));
  if (!is_supported_block_size(cfg.block_size))
    p.add("block_size", "block size " + std::to_string(cfg.block_size) + " is not one of " + block_size_choices());
  check_pool(cfg, p);
  check_window(cfg, p);
  check_scheduler(cfg, p);
  check_modes(cfg, p);
  check_evict(cfg, model, p);
  if (cfg.evict.on() && model.has_recurrent())
    p.add("evict", "token eviction drops tokens from the KV cache, but " + model.arch +
                       "'s recurrent layers already folded them into their state: not for this model");
  check_kivi_residual(cfg, model, p);
  return p.list;
}

std::vector<ConfigProblem> blocking_problems(const std::vector<ConfigProblem>& problems) {
  std::vector<ConfigProblem> out;
  for (const ConfigProblem& q : problems)
    if (!q.advisory) out.push_back(q);
  return out;
}

std::string describe_problems(const std::vector<ConfigProblem>& problems) {
  std::string s;
  for (const ConfigProblem& q : problems) s += (s.empty() ? "" : "; ") + q.message;
  return s;
}

}  // namespace kvscope
