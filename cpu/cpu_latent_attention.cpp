// CpuBackend::latent_attention (cpu/cpu_backend.h): DeepSeek's multi-head latent attention in
// the form llama.cpp runs it (model_config.h MlaConfig). The cache stores one row per token,
// [latent c | RoPE key]; every head attends over those rows as one shared KV head (GQA with a
// single group), with queries that were moved into latent space first:
//   score_h(t, s) = q_nope_h . (k_b_h^T c_s) + q_rope_h . k_rope_s = (k_b_h q_nope_h) . c_s + ...
// and a head's output, a mix of latents, goes back through v_b_h to the head's value width.
// So the cache never holds per-head keys or values, which is the whole point of MLA.
#include <algorithm>

#include "cpu/cpu_backend.h"
#include "cpu/ops.h"

namespace kvscope {

// q_ [n][n_head][kv_lora_rank + rope]: each head's no-RoPE query through k_b into latent space,
// then its RoPE part (rotated here unless sink mode rotates it at attention time).
void CpuBackend::latent_queries(const LayerWeights& L, const BatchView& batch) {
  const ModelConfig& c = model_->config;
  const MlaConfig& m = c.mla;
  const MlaWeights& W = L.mla;
  const int32_t n = batch.n_tokens();
  const int64_t H = c.n_head, nope = m.qk_nope, qk = m.qk_nope + c.rope_dim, R = m.kv_lora_rank, D = c.head_dim;
  mla_q_.resize(static_cast<size_t>(n * H * qk));
  if (W.wq_a.data) {  // low-rank query: down, RMS norm, up
    const int64_t QR = m.q_lora_rank;
    mla_qa_.resize(static_cast<size_t>(n * QR));
    matmul_timed(W.wq_a, xn_.data(), n, mla_qa_.data());
    for (int32_t t = 0; t < n; ++t) rms_norm(&mla_qa_[t * QR], W.q_a_norm.data(), &mla_qa_[t * QR], QR, c.rms_eps);
    matmul_timed(W.wq_b, mla_qa_.data(), n, mla_q_.data());
  } else {
    matmul_timed(L.wq, xn_.data(), n, mla_q_.data());
  }
  mla_in_.resize(static_cast<size_t>(n * nope));
  mla_out_.resize(static_cast<size_t>(n * R));
  const bool rope_now = !sink_mode();
  for (int64_t h = 0; h < H; ++h) {
    for (int32_t t = 0; t < n; ++t) {
      const float* src = &mla_q_[(t * H + h) * qk];
      std::copy(src, src + nope, &mla_in_[t * nope]);
    }
    matmul_timed(W.k_b[static_cast<size_t>(h)], mla_in_.data(), n, mla_out_.data());
    for (int32_t t = 0; t < n; ++t) {
      float* dst = &q_[(t * H + h) * D];
      std::copy(&mla_out_[t * R], &mla_out_[(t + 1) * R], dst);
      const float* rope_src = &mla_q_[(t * H + h) * qk + nope];
      std::copy(rope_src, rope_src + c.rope_dim, dst + R);
      if (rope_now)
        rope_inplace(dst + R, c.rope_dim, batch.positions[static_cast<size_t>(t)], c.rope_base, c.rope_freq_scale,
                     c.traits.rope, rope_factors_, &c.yarn);
    }
  }
}

void CpuBackend::latent_attention(int32_t il, const BatchView& batch) {
  const ModelConfig& c = model_->config;
  const MlaConfig& m = c.mla;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int32_t n = batch.n_tokens();
  const int64_t E = c.n_embd, H = c.n_head, R = m.kv_lora_rank, D = c.head_dim, V = m.v_dim;
  const int32_t group = layer_group_[static_cast<size_t>(il)];
  CpuKvStorage& kv = kv_[static_cast<size_t>(group)];
  const int32_t kv_layer = layer_slot_[static_cast<size_t>(il)];
  const std::vector<int64_t>& slots = batch.group_slots(group);
  for (int32_t t = 0; t < n; ++t) rms_norm(&x_[t * E], L.attn_norm.data(), &xn_[t * E], E, c.rms_eps);
  latent_queries(L, batch);
  // The cache rows: the normalised latent, then the RoPE key (before RoPE in sink mode).
  matmul_timed(L.mla.wkv_a, xn_.data(), n, k_.data());
  for (int32_t t = 0; t < n; ++t) {
    float* row = &k_[t * D];
    rms_norm(row, L.mla.kv_a_norm.data(), row, R, c.rms_eps);
    if (!sink_mode())
      rope_inplace(row + R, c.rope_dim, batch.positions[static_cast<size_t>(t)], c.rope_base, c.rope_freq_scale,
                   c.traits.rope, rope_factors_, &c.yarn);
    kv.store(kv_layer, false, slots[static_cast<size_t>(t)], 0, row);
    if (il == 0 && !mass_.empty()) reset_mass(slots[static_cast<size_t>(t)]);
  }
  attention(il, batch, q_.data(), att_.data());  // att_ [n][n_head][kv_lora_rank]
  kv.complete_deferred(kv_layer);
  // Each head's output out of latent space.
  mla_in_.resize(static_cast<size_t>(n * R));
  mla_out_.resize(static_cast<size_t>(n * V));
  mla_heads_.resize(static_cast<size_t>(n * H * V));
  for (int64_t h = 0; h < H; ++h) {
    for (int32_t t = 0; t < n; ++t) std::copy(&att_[(t * H + h) * R], &att_[(t * H + h + 1) * R], &mla_in_[t * R]);
    matmul_timed(L.mla.v_b[static_cast<size_t>(h)], mla_in_.data(), n, mla_out_.data());
    for (int32_t t = 0; t < n; ++t) std::copy(&mla_out_[t * V], &mla_out_[(t + 1) * V], &mla_heads_[(t * H + h) * V]);
  }
  attention_output(il, n, mla_heads_.data());
}

}  // namespace kvscope
