// Qwen3.5's Gated DeltaNet layers as llama.cpp's qwen35 graph computes them (src/models/qwen35.cpp
// build_layer_attn_linear, ggml's ssm_conv and fused gated_delta_net ops). Per token, in order:
//   [q; k; v] = silu(causal depthwise conv of in_proj(x) over the last conv_kernel inputs)
//   q, k L2-normalized per head; value head h reads key head h % n_k_heads
//   S_h = exp(g) S_h, g = softplus(alpha + dt_bias) * a      (the decay; a = -exp(A_log))
//   S_h += k (beta (v - S_h^T k))^T, beta = sigmoid(beta)    (the delta rule)
//   o_h = S_h^T q / sqrt(d_state), then RMSNorm(o_h) * silu(z_h)
// The state (conv inputs and every S_h) carries over between chunks and is zeroed at position 0,
// so any split of a prompt into chunks gives the same numbers: the tokens run one by one.
#include <cmath>

#include "cpu/affine.h"
#include "cpu/causal_conv.h"
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"

namespace kvscope {

namespace {

// ggml's build_gdn_l2_norm: rms_norm(x, eps / n) / sqrt(n) = x / sqrt(sum x^2 + eps).
void l2_normalize(float* x, int32_t n, float eps) {
  rms_norm(x, nullptr, x, n, eps / static_cast<float>(n));
  const float s = 1.0f / std::sqrt(static_cast<float>(n));
  for (int32_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace

void CpuBackend::gated_delta_net_block(int32_t il, const BatchView& batch) {
  const ModelConfig& c = model_->config;
  const GdnConfig& g = c.gdn;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const GdnWeights& G = L.gdn;
  const int32_t n = batch.n_tokens(), D = g.d_state;
  const int64_t E = c.n_embd, C = g.conv_channels(), V = g.value_dim(), H = g.n_v_heads;
  gdn_mix_.resize(static_cast<size_t>(n * C));
  gdn_z_.resize(static_cast<size_t>(n * V));
  gdn_out_.resize(static_cast<size_t>(n * V));
  gdn_alpha_.resize(static_cast<size_t>(n * H));
  gdn_beta_.resize(static_cast<size_t>(n * H));
  for (int32_t t = 0; t < n; ++t)
    rms_norm(&x_[t * E], L.attn_norm.data(), &xn_[t * E], static_cast<int32_t>(E), c.rms_eps);
  matmul_shared_timed({{&G.in_proj, gdn_mix_.data()},
                       {&G.z_proj, gdn_z_.data()},
                       {&G.alpha_proj, gdn_alpha_.data()},
                       {&G.beta_proj, gdn_beta_.data()}},
                      xn_.data(), n);
  apply_affine(gdn_mix_.data(), n, C, Affine{{}, G.in_scale}, AffineOrder::ScaleThenBias);
  apply_affine(gdn_z_.data(), n, V, Affine{{}, G.z_scale}, AffineOrder::ScaleThenBias);
  apply_affine(gdn_alpha_.data(), n, H, Affine{{}, G.alpha_scale}, AffineOrder::ScaleThenBias);
  apply_affine(gdn_beta_.data(), n, H, Affine{{}, G.beta_scale}, AffineOrder::ScaleThenBias);
  for (int32_t t = 0; t < n; ++t) {
    float* st = token_state(il, batch, t);
    delta_rule_token(G, st, &gdn_mix_[static_cast<size_t>(t * C)], &gdn_alpha_[static_cast<size_t>(t * H)],
                     &gdn_beta_[static_cast<size_t>(t * H)], &gdn_out_[static_cast<size_t>(t * V)]);
    store_token_state(batch, t);
  }
  for (int64_t r = 0; r < n * H; ++r) {  // RMSNorm of each head's output, times silu(z)
    float* o = &gdn_out_[static_cast<size_t>(r * D)];
    const float* z = &gdn_z_[static_cast<size_t>(r * D)];
    rms_norm(o, G.norm.data(), o, D, c.rms_eps);
    for (int32_t i = 0; i < D; ++i) o[i] *= silu(z[i]);
  }
  matmul_timed(G.out_proj, gdn_out_.data(), n, o_.data());
  apply_affine(o_.data(), n, E, Affine{{}, G.out_scale}, AffineOrder::ScaleThenBias);
  add_mixer_output(il, n);
}

void CpuBackend::delta_rule_token(const GdnWeights& G, float* st, float* mix, const float* alpha, const float* beta,
                                  float* out) const {
  const GdnConfig& g = model_->config.gdn;
  const int32_t K = g.conv_kernel, D = g.d_state, HK = g.n_k_heads;
  const int64_t C = g.conv_channels();
  causal_conv_silu_step(st, G.conv_kernel.data(), nullptr, mix, C, K);
  float *q = mix, *k = mix + g.key_dim(), *v = mix + 2 * g.key_dim();
  for (int32_t h = 0; h < HK; ++h) {
    l2_normalize(q + h * D, D, model_->config.rms_eps);
    l2_normalize(k + h * D, D, model_->config.rms_eps);
  }
  float* S = st + g.conv_floats();
  const float out_scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int32_t h = 0; h < g.n_v_heads; ++h) {
    // M[j][i] = S[i][j]: row j of M is value dim j's column, so each step is a dot or an axpy.
    float* M = S + static_cast<int64_t>(h) * D * D;
    const float* kh = k + (h % HK) * D;
    const float* qh = q + (h % HK) * D;
    const float* vh = v + h * D;
    const float decay = std::exp(softplus(alpha[h] + G.dt_bias[static_cast<size_t>(h)]) * G.a[static_cast<size_t>(h)]);
    const float b = sigmoid(beta[h]);
    for (int64_t i = 0; i < static_cast<int64_t>(D) * D; ++i) M[i] *= decay;
    for (int32_t j = 0; j < D; ++j) {
      float* row = M + static_cast<int64_t>(j) * D;
      axpy_f32((vh[j] - dot_f32(row, kh, D)) * b, kh, row, D);
      out[h * D + j] = dot_f32(row, qh, D) * out_scale;
    }
  }
}

}  // namespace kvscope
