// lfm2's short-convolution layers and the per-sequence state they keep, as llama.cpp's lfm2
// graph computes them (src/models/lfm2.cpp build_shortconv_block, ggml_ssm_conv): per channel
// e, out_t[e] = sum_k w[e][k] * window_t[k] over the window [the L-1 values before t, B_t x_t],
// summed in f32 oldest first; the state is the last L-1 values of B*x. A sequence at position
// 0 starts from zeros (a new one, or one recomputed after a preemption); chunks continue it,
// so any split of a prompt into chunks gives the same numbers.
#include <stdexcept>

#include "cpu/cpu_backend.h"
#include "cpu/ops.h"

namespace kvscope {

void CpuBackend::short_conv_block(int32_t il, const BatchView& batch) {
  const ModelConfig& c = model_->config;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int32_t n = batch.n_tokens(), K = c.conv_l_cache, S = K - 1;
  const int64_t E = c.n_embd;
  conv_bcx_.resize(static_cast<size_t>(n * 3 * E));
  conv_y_.resize(static_cast<size_t>(n * E));
  for (int32_t t = 0; t < n; ++t)
    rms_norm(&x_[t * E], L.attn_norm.data(), &xn_[t * E], static_cast<int32_t>(E), c.rms_eps);
  matmul_timed(L.conv_in, xn_.data(), n, conv_bcx_.data());
  for (int32_t t = 0; t < n; ++t) {
    float* st = token_state(il, batch, t);
    const float* b = &conv_bcx_[static_cast<size_t>(t * 3 * E)];
    const float *cc = b + E, *x = b + 2 * E;
    float* y = &conv_y_[static_cast<size_t>(t * E)];
    for (int64_t e = 0; e < E; ++e) {
      float* s = st + e * S;
      const float* w = &L.conv_kernel[static_cast<size_t>(e * K)];
      const float bx = b[e] * x[e];
      float sum = 0.0f;
      for (int32_t k = 0; k < S; ++k) sum += s[k] * w[k];
      sum += bx * w[S];
      for (int32_t k = 0; k + 1 < S; ++k) s[k] = s[k + 1];
      s[S - 1] = bx;
      y[e] = cc[e] * sum;
    }
    store_token_state(batch, t);
  }
  matmul_timed(L.conv_out, conv_y_.data(), n, o_.data());
  add_mixer_output(il, n);
}

}  // namespace kvscope
