// Granite 4.0-H's Mamba-2 layers as llama.cpp computes them (src/models/mamba-base.cpp
// build_mamba2_layer, ggml's ssm_conv and ssm_scan ops). Per token, in order:
//   [z; xBC; dt] = in_proj(x); xBC = silu(causal depthwise conv of xBC + conv bias)
//   per head h (group g = h / (n_heads / n_groups)), with s = softplus(dt_h + dt_bias_h):
//     state_h = exp(s A_h) state_h + s B_g x_h^T      (d_state x head_dim)
//     y_h = state_h^T C_g + D_h x_h
//   y = silu(z) * y, RMS-normed in n_groups groups, out_proj.
// The state (conv inputs and every head's state) carries over between chunks and is zeroed at
// position 0, so any split of a prompt into chunks gives the same numbers.
#include <cmath>

#include "cpu/affine.h"
#include "cpu/causal_conv.h"
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"

namespace kvscope {

void CpuBackend::mamba2_block(int32_t il, const BatchView& batch) {
  const ModelConfig& c = model_->config;
  const Mamba2Config& m = c.mamba2;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const Mamba2Weights& M = L.mamba2;
  const int32_t n = batch.n_tokens();
  const int64_t E = c.n_embd, P = m.in_proj_rows(), DI = m.d_inner, G = m.d_inner / m.n_groups;
  gdn_mix_.resize(static_cast<size_t>(n * P));
  gdn_out_.resize(static_cast<size_t>(n * DI));
  for (int32_t t = 0; t < n; ++t)
    rms_norm(&x_[t * E], L.attn_norm.data(), &xn_[t * E], static_cast<int32_t>(E), c.rms_eps);
  matmul_timed(M.in_proj, xn_.data(), n, gdn_mix_.data());
  apply_affine(gdn_mix_.data(), n, P, Affine{{}, M.in_scale}, AffineOrder::ScaleThenBias);
  for (int32_t t = 0; t < n; ++t) {
    float* row = &gdn_mix_[static_cast<size_t>(t * P)];
    float* y = &gdn_out_[static_cast<size_t>(t * DI)];
    mamba2_token(M, token_state(il, batch, t), row, y);
    store_token_state(batch, t);
    for (int64_t i = 0; i < DI; ++i) y[i] *= silu(row[i]);  // z gates y (ggml_swiglu_split)
    for (int64_t g = 0; g < m.n_groups; ++g)
      rms_norm(y + g * G, &M.norm[static_cast<size_t>(g * G)], y + g * G, static_cast<int32_t>(G), c.rms_eps);
  }
  matmul_timed(M.out_proj, gdn_out_.data(), n, o_.data());
  apply_affine(o_.data(), n, E, Affine{{}, M.out_scale}, AffineOrder::ScaleThenBias);
  add_mixer_output(il, n);
}

void CpuBackend::mamba2_token(const Mamba2Weights& M, float* st, float* row, float* y) const {
  const Mamba2Config& m = model_->config.mamba2;
  const int32_t N = m.d_state, HD = m.head_dim();
  const int64_t C = m.conv_channels();
  float* xbc = row + m.d_inner;
  causal_conv_silu_step(st, M.conv_kernel.data(), M.conv_bias.empty() ? nullptr : M.conv_bias.data(), xbc, C,
                        m.conv_kernel);
  const float* x = xbc;
  const float* B = xbc + m.d_inner;
  const float* Cm = B + static_cast<int64_t>(m.n_groups) * N;
  const float* dt = xbc + C;
  float* S = st + m.conv_floats();  // [head][head_dim][d_state], as ggml's ssm_scan
  for (int32_t h = 0; h < m.n_heads; ++h) {
    const float sp = softplus(dt[h] + M.dt_bias[static_cast<size_t>(h)]);
    const float dA = std::exp(sp * M.a[static_cast<size_t>(h)]);
    const int32_t g = h / (m.n_heads / m.n_groups);
    const float* Bg = B + static_cast<int64_t>(g) * N;
    const float* Cg = Cm + static_cast<int64_t>(g) * N;
    for (int32_t i = 0; i < HD; ++i) {
      const int64_t d = static_cast<int64_t>(h) * HD + i;
      float* sd = S + d * N;
      const float x_dt = x[d] * sp;
      float sum = 0.0f;
      for (int32_t k = 0; k < N; ++k) {
        sd[k] = sd[k] * dA + Bg[k] * x_dt;
        sum += sd[k] * Cg[k];
      }
      y[d] = sum + x[d] * M.d[static_cast<size_t>(h)];
    }
  }
}

}  // namespace kvscope
