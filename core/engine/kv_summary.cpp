#include "engine/kv_summary.h"

#include <algorithm>
#include <cstdio>

namespace kvscope {

namespace {

// KIVI with a residual R > 0: what the f16 side table adds per sequence at most (the block being
// filled and the full blocks fewer than R tokens old, in every group). Empty otherwise, so the
// line of every other setting is unchanged.
std::string residual_note(const std::vector<KvLayout>& groups) {
  const KvLayout& L = groups[0];
  if (!kv_dtype_block_quantized(L.dtype) || L.kivi_residual <= 0) return {};
  const int64_t blocks = (L.kivi_residual + L.block_size - 1) / L.block_size + 1;
  int64_t bytes = 0;
  for (const KvLayout& g : groups)
    bytes += blocks * g.n_layer * g.n_head_kv * kv_residual_bytes_per_block_head(g.dtype, g.head_dim, g.block_size);
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "; KIVI residual %d tokens in f16 (+ the block being filled): up to %.1f KiB per sequence",
                L.kivi_residual, static_cast<double>(bytes) / 1024);
  return buf;
}

}  // namespace

std::string describe_kv_pools(const Backend& backend, int32_t max_model_len, int32_t sliding_window,
                              int32_t sliding_blocks_per_seq) {
  const std::vector<KvLayout> G = backend.kv_group_layouts();
  if (G.size() > 1) {
    // Sequences at full context: each holds every global block but only the window's sliding ones.
    const double global_tokens = static_cast<double>(G[0].num_blocks) * G[0].block_size;
    const double concurrency =
        std::min(global_tokens / max_model_len, static_cast<double>(G[1].num_blocks) / sliding_blocks_per_seq);
    char buf[512];
    std::snprintf(
        buf, sizeof buf,
        "KV cache (hybrid, %s): global %d blocks = %.2f MiB (%d layers, %lld B/token), sliding %d blocks = %.2f MiB "
        "(%d layers, window %d, %lld B/token); total %.2f MiB, max concurrency %.2fx at context %d",
        kv_dtype_name(G[0].dtype), G[0].num_blocks, static_cast<double>(G[0].total_bytes()) / (1 << 20), G[0].n_layer,
        static_cast<long long>(G[0].bytes_per_token()), G[1].num_blocks,
        static_cast<double>(G[1].total_bytes()) / (1 << 20), G[1].n_layer, sliding_window,
        static_cast<long long>(G[1].bytes_per_token()), static_cast<double>(backend.kv_total_bytes()) / (1 << 20),
        concurrency, max_model_len);
    std::string shapes;
    if (G[0].n_head_kv != G[1].n_head_kv || G[0].head_dim != G[1].head_dim)  // gemma4: a head shape per pool
      shapes = "; global layers " + std::to_string(G[0].n_head_kv) + " KV heads x " + std::to_string(G[0].head_dim) +
               ", sliding layers " + std::to_string(G[1].n_head_kv) + " KV heads x " + std::to_string(G[1].head_dim);
    return buf + shapes + residual_note(G);
  }
  const KvLayout& L = backend.kv_layout();
  const int64_t tokens = static_cast<int64_t>(L.num_blocks) * L.block_size;
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "KV cache%s: %d blocks = %lld tokens = %.2f MiB (%s, %lld B/token), max concurrency %.2fx at context %d",
      L.latent ? " (latent rows: key and value at once)" : "", L.num_blocks, static_cast<long long>(tokens),
      static_cast<double>(L.total_bytes()) / (1 << 20), kv_dtype_name(L.dtype),
      static_cast<long long>(L.bytes_per_token()), static_cast<double>(tokens) / max_model_len, max_model_len);
  return buf + residual_note(G);
}

std::string describe_state_slots(const Backend& backend, const StateSlotManager* slots) {
  if (!slots) return {};
  const int64_t per_slot = backend.state_bytes_per_slot();
  const int32_t n_ckpt = slots->checkpoints().capacity();
  char buf[320];
  std::snprintf(buf, sizeof buf, "; recurrent state (%s): %d slots x %lld B = %.2f MiB (fixed per sequence)",
                state_dtype_name(backend.state_dtype()), slots->num_state_slots(), static_cast<long long>(per_slot),
                static_cast<double>(per_slot) * slots->num_state_slots() / (1 << 20));
  std::string out = buf;
  if (n_ckpt == 0) return out + "; no state checkpoints, so no prefix-cache hits";
  std::snprintf(buf, sizeof buf, "; state checkpoints (%s): %d x %lld B = %.2f MiB",
                checkpoint_policy_name(slots->checkpoint_policy()).c_str(), n_ckpt, static_cast<long long>(per_slot),
                static_cast<double>(per_slot) * n_ckpt / (1 << 20));
  return out + buf;
}

std::string describe_borrowed_kv(const ModelConfig& c) {
  std::string layers, sources;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    if (c.layer_owns_kv(il)) continue;
    layers += (layers.empty() ? "" : ",") + std::to_string(il);
    sources += (sources.empty() ? "" : ",") + std::to_string(c.kv_source(il));
  }
  if (layers.empty()) return {};
  return "; layers " + layers + " read the KV of layers " + sources + " (no KV of their own)";
}

}  // namespace kvscope
