#include "cpu/cpu_backend.h"

#include <unistd.h>
#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "cpu/affine.h"
#include "cpu/ffn_activation.h"
#include "cpu/attention_split.h"
#include "cpu/matmul.h"
#include "cpu/online_attention.h"
#include "cpu/ops.h"
#include "cpu/visible_keys.h"
#include "cpu/kv_quant4.h"

namespace kvscope {

CpuBackend::CpuBackend(std::shared_ptr<const Model> model, int n_threads)
    : model_(std::move(model)), pool_(n_threads), kv_(1) {
  scratch_.resize(static_cast<size_t>(pool_.size()));
  long l2 = -1;
#if defined(_SC_LEVEL2_CACHE_SIZE)
  l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  prefetch_min_bytes_ = (l2 > 0 ? l2 : 1 << 20) / 4;
  const char* tile = std::getenv("KVSCOPE_QUERY_TILE");
  set_query_tile(tile ? std::atoi(tile) : kQueryTileMax);
}

std::string CpuBackend::name() const { return "cpu (" + std::to_string(pool_.size()) + " threads)"; }

void CpuBackend::init_kv(const KvLayout& layout, const AttentionPolicy& policy) {
  KvGroupSpec all{layout, {}};
  for (int32_t il = 0; il < model_->config.n_layer; ++il)
    if (model_->config.layer_keeps_kv(il)) all.layers.push_back(il);
  init_kv_groups(std::span<const KvGroupSpec>(&all, 1), policy);
}

void CpuBackend::init_kv_groups(std::span<const KvGroupSpec> groups, const AttentionPolicy& policy) {
  const ModelConfig& c = model_->config;
  if (groups.empty()) throw std::invalid_argument("KV layout: at least one KV group is needed");
  if (policy.window < 0 || policy.sinks < 0) throw std::invalid_argument("window and sinks must not be negative");
  if (policy.sinks > 0 && policy.window == 0) throw std::invalid_argument("attention sinks need a sliding window");
  std::vector<int32_t> layer_group(static_cast<size_t>(c.n_layer), -1), layer_slot(static_cast<size_t>(c.n_layer), -1);
  const std::string every = "KV groups must hold every layer that keeps KV exactly once";
  for (size_t g = 0; g < groups.size(); ++g) {
    const KvLayout& l = groups[g].layout;
    if (l.latent != c.latent_kv() || l.n_layer != static_cast<int32_t>(groups[g].layers.size()) ||
        l.block_size != groups[0].layout.block_size)
      throw std::invalid_argument("KV layout does not match the model");
    for (size_t i = 0; i < groups[g].layers.size(); ++i) {
      const int32_t il = groups[g].layers[i];
      if (il < 0 || il >= c.n_layer || layer_group[static_cast<size_t>(il)] >= 0 || !c.layer_keeps_kv(il))
        throw std::invalid_argument(every);
      if (l.n_head_kv != c.layer_n_head_kv(il) || l.head_dim != c.layer_head_dim(il))
        throw std::invalid_argument("KV layout does not match the model's layer " + std::to_string(il));
      layer_group[static_cast<size_t>(il)] = static_cast<int32_t>(g);
      layer_slot[static_cast<size_t>(il)] = static_cast<int32_t>(i);
    }
  }
  // A layer that borrows KV (gemma4's last layers) reads its source layer's storage; a recurrent
  // layer (lfm2's convolutions) has none.
  for (int32_t il = 0; il < c.n_layer; ++il) {
    if (c.layer_is_recurrent(il)) continue;
    const auto src = static_cast<size_t>(c.kv_source(il));
    if (layer_group[src] < 0) throw std::invalid_argument(every);
    layer_group[static_cast<size_t>(il)] = layer_group[src];
    layer_slot[static_cast<size_t>(il)] = layer_slot[src];
  }
  // The old pools go first so a re-init never holds both; a failed init leaves empty pools.
  kv_.clear();
  kv_.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    kv_[g].init(groups[g].layout);
    kv_[g].defer_completion(true);  // KIVI: see attention_block
  }
  layer_group_ = std::move(layer_group);
  layer_slot_ = std::move(layer_slot);
  set_policy(policy);
}

std::vector<KvLayout> CpuBackend::kv_group_layouts() const {
  std::vector<KvLayout> out;
  for (const CpuKvStorage& s : kv_) out.push_back(s.layout());
  return out;
}

void CpuBackend::set_policy(const AttentionPolicy& policy) {
  const ModelConfig& c = model_->config;
  policy_ = policy;
  rope_factors_ = c.rope_factors(policy.context_len);
  rope_cs_[0].clear();
  rope_cs_[1].clear();
  if (sink_mode()) {
    // A query sees at most sinks + window keys (itself included), so cache positions are
    // bounded by that, whatever the length of the text. One table per layer kind (global,
    // sliding), with that kind's base, rotated dims and factors.
    const int32_t n_pos = policy.sinks + policy.window;
    const float bases[2] = {c.rope_base, c.rope_base_swa};
    for (int i = 0; i < 2; ++i) {
      int32_t il = 0;
      while (il + 1 < c.n_layer && c.layer_is_swa(il) != (i == 1)) ++il;
      const int32_t dim = c.layer_rope_dim(il);
      rope_cs_[i].resize(static_cast<size_t>(n_pos) * dim);
      for (int32_t p = 0; p < n_pos; ++p)
        rope_cos_sin_row(dim, p, bases[i], c.rope_freq_scale, &rope_cs_[i][static_cast<size_t>(p) * dim],
                         c.layer_rope_factors(il, policy.context_len), &c.yarn);
    }
  }
}

const float* CpuBackend::cache_rope(int32_t il, int32_t p) const {
  const auto& t = rope_cs_[model_->config.layer_is_swa(il) ? 1 : 0];
  const int32_t dim = model_->config.layer_rope_dim(il);
  assert(p >= 0 && static_cast<size_t>(p + 1) * dim <= t.size());
  return &t[static_cast<size_t>(p) * dim];
}

int64_t CpuBackend::kv_residual_peak_bytes() const {
  int64_t n = 0;
  for (const CpuKvStorage& s : kv_)
    n += s.peak_residual_bytes();  // each group's peak: an upper bound of the joint peak
  return n;
}

void CpuBackend::copy_blocks(std::span<const BlockCopy> copies) {
  for (const BlockCopy& cp : copies) {
    if (cp.group < 0 || cp.group >= static_cast<int32_t>(kv_.size()))
      throw std::invalid_argument("block copy for an unknown KV group");
    kv_[static_cast<size_t>(cp.group)].copy_block(cp.src, cp.dst, cp.n_slots);
  }
}

void CpuBackend::release_blocks(std::span<const BlockRelease> released) {
  for (const BlockRelease& r : released) {
    if (r.group < 0 || r.group >= static_cast<int32_t>(kv_.size()))
      throw std::invalid_argument("block release for an unknown KV group");
    kv_[static_cast<size_t>(r.group)].release_block(r.block);
  }
}

// KIVI with a residual of R tokens: after a layer's attention, every block of a batch sequence
// with at least R of the sequence's tokens after it (those written this step included) is
// quantized. Walks each table back from the newest such block and stops at the first one
// already quantized: blocks are quantized oldest first, so everything before it is too
// (dropped window blocks, kNoBlock, are skipped; prefix-cache hits are final, so the walk
// stops there). Rows are positions: KIVI excludes token eviction.
void CpuBackend::complete_aged_blocks(CpuKvStorage& kv, int32_t kv_layer, int32_t group, const BatchView& batch) const {
  const int32_t bs = kv.layout().block_size, R = kv.layout().kivi_residual;
  const auto& tables = batch.group_tables(group);
  std::vector<int32_t> len(tables.size(), 0);  // tokens of each sequence once this step is done
  for (int32_t t = 0; t < batch.n_tokens(); ++t) {
    int32_t& n = len[static_cast<size_t>(batch.seq_index[static_cast<size_t>(t)])];
    n = std::max(n, batch.positions[static_cast<size_t>(t)] + 1);
  }
  for (size_t s = 0; s < tables.size(); ++s) {
    const int32_t final_blocks =
        std::min<int32_t>(std::max(0, len[s] - R) / bs, static_cast<int32_t>(tables[s].size()));
    for (int32_t bi = final_blocks - 1; bi >= 0; --bi) {
      const BlockId b = tables[s][static_cast<size_t>(bi)];
      if (b == kNoBlock) continue;
      if (!kv.block_pending(kv_layer, b)) break;
      kv.complete_block(kv_layer, b);
    }
  }
}

int32_t CpuBackend::layer_window(int32_t layer) const {
  const ModelConfig& c = model_->config;
  int32_t w = policy_.window;
  if (c.layer_is_swa(layer) && c.sliding_window > 0) w = (w == 0) ? c.sliding_window : std::min(w, c.sliding_window);
  return w;
}

void CpuBackend::start_recording(OnlineAttention& att, Scratch& sc, int32_t n_q, int32_t max_rows) const {
  sc.rec.resize(static_cast<size_t>(n_q) * static_cast<size_t>(std::max(1, max_rows)));
  sc.rec_slots.clear();
  att.record_scores(sc.rec.data(), std::max(1, max_rows));
}

// The pass's exact softmax weights, summed over its query heads, into this thread's per-slot
// accumulator (merged into mass_ at the end of forward(): threads never write one array).
void CpuBackend::finish_recording(const OnlineAttention& att, Scratch& sc) const {
  const size_t n_slots = static_cast<size_t>(kv_[0].layout().num_blocks) * kv_[0].layout().block_size;
  if (sc.mass.size() < n_slots) sc.mass.resize(n_slots, 0.0f);
  sc.w.resize(static_cast<size_t>(att.recorded_rows()));
  att.add_probabilities(sc.w.data());
  for (size_t j = 0; j < sc.w.size(); ++j) {
    const auto slot = static_cast<size_t>(sc.rec_slots[j]);
    sc.mass[slot] += sc.w[j];
    sc.touched.push_back(sc.rec_slots[j]);
  }
}

// per_layer: also into layer_mass_'s row of this layer (per-layer eviction chooses from it).
void CpuBackend::merge_attention_mass(int32_t layer, bool per_layer) {
  const size_t n_slots = static_cast<size_t>(kv_[0].layout().num_blocks) * kv_[0].layout().block_size;
  if (mass_.size() != n_slots) mass_.assign(n_slots, 0.0f);
  if (per_layer && layer_mass_.size() != n_slots * model_->config.n_layer)
    layer_mass_.assign(n_slots * model_->config.n_layer, 0.0f);
  float* lm = per_layer ? &layer_mass_[static_cast<size_t>(layer) * n_slots] : nullptr;
  for (Scratch& sc : scratch_) {
    for (int64_t slot : sc.touched) {
      mass_[static_cast<size_t>(slot)] += sc.mass[static_cast<size_t>(slot)];
      if (lm) lm[slot] += sc.mass[static_cast<size_t>(slot)];
      sc.mass[static_cast<size_t>(slot)] = 0.0f;
    }
    sc.touched.clear();
  }
}

void CpuBackend::reset_mass(int64_t slot) {
  mass_[static_cast<size_t>(slot)] = 0.0f;
  for (size_t base = 0; base < layer_mass_.size(); base += mass_.size())
    layer_mass_[base + static_cast<size_t>(slot)] = 0.0f;
}

void CpuBackend::copy_slots(std::span<const SlotCopy> copies) {
  for (const SlotCopy& cp : copies) {
    kv_[0].copy_slot(cp.src, cp.dst);
    if (!mass_.empty()) mass_[static_cast<size_t>(cp.dst)] = mass_[static_cast<size_t>(cp.src)];
    const size_t n_slots = mass_.size();
    for (size_t base = 0; base < layer_mass_.size(); base += n_slots)
      layer_mass_[base + static_cast<size_t>(cp.dst)] = layer_mass_[base + static_cast<size_t>(cp.src)];
  }
}

int32_t CpuBackend::layer_sinks(int32_t layer) const {
  const ModelConfig& c = model_->config;
  const bool own_window = c.layer_is_swa(layer) && c.sliding_window > 0;
  return own_window && !policy_.sinks_in_sliding_layers ? 0 : policy_.sinks;
}

const CpuKvStorage& CpuBackend::kv_of(int32_t layer, int32_t* kv_layer) const {
  *kv_layer = layer_slot_[static_cast<size_t>(layer)];
  return kv_[static_cast<size_t>(layer_group_[static_cast<size_t>(layer)])];
}

void CpuBackend::attention(int32_t layer, const BatchView& batch, const float* q, float* out) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = model_->config;
  const int32_t n_kv = c.layer_n_head_kv(layer), n_q = c.n_head / n_kv;
  const int32_t dv = c.latent_kv() ? c.attn_v_dim() : c.layer_head_dim(layer);
  if (plan_tiles(batch, n_kv)) {
    // Query tiles (prefill chunks): (tile, KV head) units, later tiles (more keys) first.
    const int64_t units = static_cast<int64_t>(tiles_.size()) * n_kv;
    pool_.parallel_for(units, [&](int64_t begin, int64_t end, int tid) {
      Scratch& sc = scratch_[static_cast<size_t>(tid)];
      for (int64_t u = begin; u < end; ++u) {
        const int64_t w = units - 1 - u;
        attend_tile(layer, batch, tiles_[static_cast<size_t>(w / n_kv)], static_cast<int32_t>(w % n_kv), q, out, sc);
      }
    });
    phase_.tiled_queries += static_cast<int64_t>(batch.n_tokens()) * n_kv;
    phase_.attention_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  const int64_t pairs = static_cast<int64_t>(batch.n_tokens()) * n_kv;
  auto q_offset = [&](int64_t i) {  // pair i's query rows
    return static_cast<int64_t>(i / n_kv) * c.layer_q_dim(layer) +
           static_cast<int64_t>(i % n_kv) * n_q * c.layer_head_dim(layer);
  };
  auto out_offset = [&](int64_t i) {  // pair i's output rows (dv wide per head)
    return (static_cast<int64_t>(i / n_kv) * c.n_head + static_cast<int64_t>(i % n_kv) * n_q) * dv;
  };
  // Recording token eviction's attention weights needs each pass over all of its keys.
  const AttentionSplit split = pairs < 2LL * pool_.size() && batch.record_attention.empty()
                                   ? plan_attention_split(pairs, mean_visible_keys(layer, batch), pool_.size())
                                   : AttentionSplit{};
  const int32_t P = split.parts;
  if (P > 1) {
    split_acc_.resize(static_cast<size_t>(pairs * P * n_q * dv));
    split_m_.resize(static_cast<size_t>(pairs * P * n_q));
    split_l_.resize(static_cast<size_t>(pairs * P * n_q));
  }
  // Heaviest first: a later token of a prompt sees more keys, so in reverse order the pool's
  // dynamically claimed chunks end together instead of one thread finishing the longest rows.
  pool_.parallel_for(pairs * P, [&](int64_t begin, int64_t end, int tid) {
    Scratch& sc = scratch_[static_cast<size_t>(tid)];
    for (int64_t u = begin; u < end; ++u) {
      const int64_t w = pairs * P - 1 - u, i = w / P;
      const int32_t t = static_cast<int32_t>(i / n_kv), g = static_cast<int32_t>(i % n_kv);
      if (P == 1) {
        attend_group(layer, batch, t, g, q + q_offset(i), out + out_offset(i), sc);
        continue;
      }
      const AttendPart part{static_cast<int32_t>(w % P), P, &split_m_[static_cast<size_t>(w * n_q)],
                            &split_l_[static_cast<size_t>(w * n_q)]};
      attend_group(layer, batch, t, g, q + q_offset(i), &split_acc_[static_cast<size_t>(w * n_q * dv)], sc, &part);
    }
  });
  for (int64_t i = 0; P > 1 && i < pairs; ++i) {
    const AttentionParts parts{&split_acc_[static_cast<size_t>(i * P * n_q * dv)],
                               &split_m_[static_cast<size_t>(i * P * n_q)],
                               &split_l_[static_cast<size_t>(i * P * n_q)]};
    merge_attention_parts(parts, P, n_q, dv, out + out_offset(i));
  }
  if (!batch.record_attention.empty()) merge_attention_mass(layer, !batch.layer_holes.empty());
  phase_.attention_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The mean number of keys a token of this batch sees in this layer (window and sinks applied).
int64_t CpuBackend::mean_visible_keys(int32_t layer, const BatchView& batch) const {
  const int32_t window = layer_window(layer);
  int64_t sum = 0;
  for (int32_t pos : batch.positions) sum += visible_range(pos, window, layer_sinks(layer)).n_vis;
  return batch.positions.empty() ? 0 : sum / static_cast<int64_t>(batch.positions.size());
}

void CpuBackend::matmul_timed(const TensorView& w, const float* x, int64_t n_tokens, float* y) {
  const auto t0 = std::chrono::steady_clock::now();
  matmul(w, x, n_tokens, y, pool_);
  phase_.matmul_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CpuBackend::matmul_shared_timed(std::initializer_list<MatmulTarget> targets, const float* x, int64_t n_tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  matmul_shared_input(std::span<const MatmulTarget>(targets.begin(), targets.size()), x, n_tokens, pool_);
  phase_.matmul_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One forward pass: embed, then per layer the attention and the FFN block (residuals in x_),
// then the logits of the wanted rows.
void CpuBackend::forward(const BatchView& batch, float* logits) {
  const ModelConfig& c = model_->config;
  const int32_t n = batch.n_tokens();
  if (n == 0) return;
  if (batch.n_groups() != static_cast<int32_t>(kv_.size()))
    throw std::invalid_argument("BatchView has " + std::to_string(batch.n_groups()) +
                                " KV groups, the backend stores " + std::to_string(kv_.size()));
  const int64_t E = c.n_embd, Q = c.max_q_dim(), KV = c.max_kv_dim(), F = c.max_n_ff();
  x_.resize(static_cast<size_t>(n * E));
  xn_.resize(static_cast<size_t>(n * E));
  q_.resize(static_cast<size_t>(n * Q));
  k_.resize(static_cast<size_t>(n * KV));
  v_.resize(static_cast<size_t>(n * KV));
  att_.resize(static_cast<size_t>(n * Q));
  o_.resize(static_cast<size_t>(n * E));
  gate_.resize(static_cast<size_t>(n * F));
  up_.resize(static_cast<size_t>(n * F));
  const auto t0 = std::chrono::steady_clock::now();
  prepare_eviction(batch);
  embed(batch);
  if (c.n_embd_per_layer > 0) per_layer_inputs(batch);
  for (int32_t il = 0; il < c.n_layer; ++il) {
    attention_block(il, batch);
    ffn_block(il, n);
    if (c.traits.per_layer_shapes) per_layer_embedding(il, n);
  }

  output_logits(batch, logits);
  phase_.forward_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Token eviction's per-slot attention weights exist from the first batch that uses eviction.
void CpuBackend::prepare_eviction(const BatchView& batch) {
  if (batch.holes.empty() && batch.record_attention.empty() && batch.rows.empty()) return;
  if (kv_.size() != 1) throw std::invalid_argument("token eviction needs a single KV group (run with --hybrid-kv off)");
  const size_t n_slots = static_cast<size_t>(kv_[0].layout().num_blocks) * kv_[0].layout().block_size;
  if (!batch.holes.empty() && batch.holes.size() != n_slots)
    throw std::invalid_argument("hole mask does not match the KV pool");
  if (!batch.layer_holes.empty() &&
      (batch.holes.size() != n_slots || batch.layer_holes.size() != n_slots * model_->config.n_layer))
    throw std::invalid_argument("per-layer hole masks do not match the KV pool and the model's layers");
  if (mass_.size() != n_slots) mass_.assign(n_slots, 0.0f);
}

// Embedding lookup (rows dequantized from the file's dtype).
void CpuBackend::embed(const BatchView& batch) {
  const ModelConfig& c = model_->config;
  const ModelWeights& W = model_->weights;
  const int64_t E = c.n_embd;
  for (int32_t t = 0; t < batch.n_tokens(); ++t) {
    const TokenId id = batch.tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= c.n_vocab)
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary");
    float* xr = &x_[static_cast<size_t>(t * E)];
    dequantize_row(W.token_embd.type(), W.token_embd.row(id), xr, E);
    if (c.traits.embed_scale || c.embedding_scale != 0.0f) {  // gemma: sqrt(n_embd); granite: its own
      const float s = c.traits.embed_scale ? std::sqrt(static_cast<float>(E)) : c.embedding_scale;
      for (int64_t i = 0; i < E; ++i) xr[i] *= s;
    }
  }
}

// Norm, Q/K/V projections, RoPE, K/V into their slots, attention, output projection, residual;
// leaves the FFN's normalised input in xn_.
void CpuBackend::attention_block(int32_t il, const BatchView& batch) {
  const ModelConfig& c = model_->config;
  if (c.latent_kv()) return latent_attention(il, batch);
  if (c.layer_is_recurrent(il) && c.traits.gated_delta_net) return gated_delta_net_block(il, batch);
  if (c.layer_is_recurrent(il) && c.traits.mamba2) return mamba2_block(il, batch);
  if (c.layer_is_recurrent(il)) return short_conv_block(il, batch);
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int32_t n = batch.n_tokens();
  const int64_t E = c.n_embd;
  const bool owns_kv = c.layer_owns_kv(il);  // gemma4's last layers read an earlier layer's KV
  for (int32_t t = 0; t < n; ++t) rms_norm(&x_[t * E], L.attn_norm.data(), &xn_[t * E], E, c.rms_eps);
  const bool gated = c.traits.attn_output_gate;  // qwen35: the query rows hold each head's gate too
  if (gated) q_rows_.resize(static_cast<size_t>(n) * c.layer_q_rows(il));
  float* q_out = gated ? q_rows_.data() : q_.data();
  if (owns_kv && L.v_from_k) {  // gemma4 without attn_v: V is K's projection, computed once
    matmul_shared_timed({{&L.wq, q_out}, {&L.wk, k_.data()}}, xn_.data(), n);
    std::copy(k_.begin(), k_.begin() + static_cast<int64_t>(n) * c.layer_kv_dim(il), v_.begin());
  } else if (owns_kv) {
    matmul_shared_timed({{&L.wq, q_out}, {&L.wk, k_.data()}, {&L.wv, v_.data()}}, xn_.data(), n);
  } else {
    matmul_timed(L.wq, xn_.data(), n, q_out);
  }
  apply_affine(q_out, n, c.layer_q_rows(il), L.aq, AffineOrder::ScaleThenBias);
  if (gated) split_query_gate(il, n);
  if (owns_kv) {
    apply_affine(k_.data(), n, c.layer_kv_dim(il), L.ak, AffineOrder::ScaleThenBias);
    apply_affine(v_.data(), n, c.layer_kv_dim(il), L.av, AffineOrder::ScaleThenBias);
  }
  for (int32_t t = 0; t < n; ++t) position_qkv(il, batch, t);
  attention(il, batch, q_.data(), att_.data());
  CpuKvStorage& kv = kv_[static_cast<size_t>(layer_group_[static_cast<size_t>(il)])];
  const int32_t kv_layer = layer_slot_[static_cast<size_t>(il)];
  // KIVI: the blocks this step filled (R = 0), or that R tokens now follow, were read in f16
  // above and are quantized now.
  if (owns_kv && kv.layout().kivi_residual > 0)
    complete_aged_blocks(kv, kv_layer, layer_group_[static_cast<size_t>(il)], batch);
  else if (owns_kv)
    kv.complete_deferred(kv_layer);
  if (gated) gate_attention_heads(il, n);
  attention_output(il, n, att_.data());
}

// Token t's q and k normed and rotated, and its K/V stored (layers that keep KV). Every token of
// the batch stores its K/V before any attention of the layer runs, so tokens of one prefill
// chunk (and prefix-cache hits filled this step) see them.
void CpuBackend::position_qkv(int32_t il, const BatchView& batch, int32_t t) {
  const ModelConfig& c = model_->config;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int64_t Q = c.layer_q_dim(il), KV = c.layer_kv_dim(il), D = c.layer_head_dim(il);
  const int32_t rope_dim = c.layer_rope_dim(il);
  const float base = c.layer_is_swa(il) ? c.rope_base_swa : c.rope_base;
  const float* factors = c.layer_rope_factors(il, policy_.context_len);
  // Sink mode rotates q and k at attention time, by cache position (see cpu_backend.h).
  const bool rope_now = !sink_mode() && c.layer_has_rope(il);
  float* qt = &q_[t * Q];
  const int32_t pos = batch.positions[static_cast<size_t>(t)];
  for (int32_t h = 0; h < c.n_head; ++h) {
    float* qh = qt + h * D;
    if (!L.q_norm.empty()) rms_norm(qh, L.q_norm.data(), qh, D, c.rms_eps);
    if (rope_now) rope_inplace(qh, rope_dim, pos, base, c.rope_freq_scale, c.traits.rope, factors, &c.yarn);
  }
  if (!c.layer_owns_kv(il)) return;
  CpuKvStorage& kv = kv_[static_cast<size_t>(layer_group_[static_cast<size_t>(il)])];
  const int32_t kv_layer = layer_slot_[static_cast<size_t>(il)];
  const int64_t slot = batch.group_slots(layer_group_[static_cast<size_t>(il)])[static_cast<size_t>(t)];
  float* kt = &k_[t * KV];
  float* vt = &v_[t * KV];
  for (int32_t h = 0; h < c.layer_n_head_kv(il); ++h) {
    float* kh = kt + h * D;
    float* vh = vt + h * D;
    if (!L.k_norm.empty()) rms_norm(kh, L.k_norm.data(), kh, D, c.rms_eps);
    if (rope_now) rope_inplace(kh, rope_dim, pos, base, c.rope_freq_scale, c.traits.rope, factors, &c.yarn);
    if (c.traits.per_layer_shapes) rms_norm(vh, nullptr, vh, D, c.rms_eps);  // gemma4: V normed, no weight
    kv.store(kv_layer, false, slot, h, kh);
    if (il == 0 && !mass_.empty()) reset_mass(slot);  // a new token
    kv.store(kv_layer, true, slot, h, vh);
  }
}

// The query projection's row per token is [q_0, gate_0, q_1, gate_1, ...], head_dim each.
void CpuBackend::split_query_gate(int32_t il, int32_t n) {
  const int64_t Q = model_->config.layer_q_dim(il), D = model_->config.layer_head_dim(il);
  q_gate_.resize(static_cast<size_t>(n * Q));
  for (int64_t r = 0; r < n * Q / D; ++r) {
    const float* src = &q_rows_[static_cast<size_t>(2 * r * D)];
    std::copy(src, src + D, &q_[static_cast<size_t>(r * D)]);
    std::copy(src + D, src + 2 * D, &q_gate_[static_cast<size_t>(r * D)]);
  }
}

void CpuBackend::gate_attention_heads(int32_t il, int32_t n) {
  const int64_t Q = model_->config.layer_q_dim(il);
  for (int64_t i = 0; i < n * Q; ++i) att_[static_cast<size_t>(i)] *= sigmoid(q_gate_[static_cast<size_t>(i)]);
}

void CpuBackend::attention_output(int32_t il, int32_t n, const float* heads) {
  const ModelConfig& c = model_->config;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int64_t E = c.n_embd;
  matmul_timed(L.wo, heads, n, o_.data());
  apply_affine(o_.data(), n, E, L.ao, AffineOrder::ScaleThenBias);
  add_mixer_output(il, n);
}

void CpuBackend::add_mixer_output(int32_t il, int32_t n) {
  const ModelConfig& c = model_->config;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int64_t E = c.n_embd;
  for (int32_t t = 0; t < n; ++t) {
    float* ot = &o_[t * E];
    if (c.traits.post_norms) rms_norm(ot, L.post_attn_norm.data(), ot, E, c.rms_eps);
    if (c.residual_scale != 0.0f)  // granite: each branch's output scaled before its residual add
      for (int64_t i = 0; i < E; ++i) ot[i] *= c.residual_scale;
    float* xt = &x_[t * E];
    for (int64_t i = 0; i < E; ++i) xt[i] += ot[i];
    rms_norm(xt, L.ffn_norm.data(), &xn_[t * E], E, c.rms_eps);
  }
}

// Gate/up projections, activation, down projection (or the routed experts), residual.
void CpuBackend::ffn_block(int32_t il, int32_t n) {
  const ModelConfig& c = model_->config;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int64_t E = c.n_embd, F = c.layer_n_ff(il);
  if (L.moe) {
    moe_ffn(L.experts, n);
  } else {
    matmul_shared_timed({{&L.w_gate, gate_.data()}, {&L.w_up, up_.data()}}, xn_.data(), n);
    apply_affine(gate_.data(), n, F, L.a_gate, AffineOrder::BiasThenScale);
    apply_affine(up_.data(), n, F, L.a_up, AffineOrder::BiasThenScale);
    ffn_activation_mul(c.traits.act, gate_.data(), up_.data(), static_cast<int64_t>(n) * F);
    matmul_timed(L.w_down, gate_.data(), n, o_.data());
    apply_affine(o_.data(), n, E, L.a_down, AffineOrder::BiasThenScale);
  }
  for (int32_t t = 0; t < n; ++t) {
    float* ot = &o_[t * E];
    if (c.traits.post_norms) rms_norm(ot, L.post_ffw_norm.data(), ot, E, c.rms_eps);
    if (c.residual_scale != 0.0f)
      for (int64_t i = 0; i < E; ++i) ot[i] *= c.residual_scale;
    float* xt = &x_[t * E];
    for (int64_t i = 0; i < E; ++i) xt[i] += ot[i];
  }
}

// Only the rows whose logits are wanted go through the (large) output matrix.
void CpuBackend::output_logits(const BatchView& batch, float* logits) {
  const ModelConfig& c = model_->config;
  const ModelWeights& W = model_->weights;
  const int64_t E = c.n_embd;
  const int32_t n_out = static_cast<int32_t>(batch.logits_rows.size());
  if (n_out == 0) return;
  for (int32_t r = 0; r < n_out; ++r) {
    const int32_t t = batch.logits_rows[static_cast<size_t>(r)];
    rms_norm(&x_[t * E], W.output_norm.data(), &xn_[r * E], E, c.rms_eps);
  }
  const double matmul_before = phase_.matmul_s;
  matmul_timed(W.output, xn_.data(), n_out, logits);
  phase_.output_s += phase_.matmul_s - matmul_before;
  if (c.logit_scale != 0.0f)  // granite: logits / logit_scale
    for (int64_t i = 0; i < static_cast<int64_t>(n_out) * c.n_vocab; ++i) logits[i] /= c.logit_scale;
  if (c.final_softcap > 0.0f) {  // gemma4: cap * tanh(logits / cap), as llama.cpp's graph
    const float cap = c.final_softcap, inv = 1.0f / cap;
    for (int64_t i = 0; i < static_cast<int64_t>(n_out) * c.n_vocab; ++i) logits[i] = cap * std::tanh(logits[i] * inv);
  }
}

}  // namespace kvscope
