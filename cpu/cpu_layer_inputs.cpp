// gemma4's per-layer embeddings and layer output scales, as llama.cpp's gemma4 graph computes
// them (src/models/gemma4.cpp: build_inp_per_layer, project_per_layer_inputs, and the end of
// each layer). Every token has, per layer, a small input vector (n_embd_per_layer wide): its
// own row of per_layer_token_embd plus a projection of its (scaled) embedding. After a layer's
// FFN, the residual stream gates that vector (GELU) and adds it back through a projection.
#include <cmath>

#include "cpu/cpu_backend.h"
#include "cpu/ops.h"

namespace kvscope {

// ple_in_[t][il][P] = ((norm(per_layer_model_proj x_t / sqrt(n_embd)) + sqrt(P) per_layer_token_embd[id_t]) / sqrt(2)
// where the norm is per layer's P values (per_layer_proj_norm); x_ holds the scaled embeddings.
void CpuBackend::per_layer_inputs(const BatchView& batch) {
  const ModelConfig& c = model_->config;
  const ModelWeights& W = model_->weights;
  const int32_t n = batch.n_tokens();
  const int64_t P = c.n_embd_per_layer, LP = P * c.n_layer;
  ple_in_.resize(static_cast<size_t>(n * LP));
  ple_x_.resize(static_cast<size_t>(n * std::max<int64_t>(LP, P)));
  matmul_timed(W.ple_model_proj, x_.data(), n, ple_in_.data());
  const float proj_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd));
  const float tok_scale = std::sqrt(static_cast<float>(P)), input_scale = 1.0f / std::sqrt(2.0f);
  for (int32_t t = 0; t < n; ++t) {
    float* in = &ple_in_[static_cast<size_t>(t * LP)];
    float* tok = &ple_x_[static_cast<size_t>(t * LP)];
    dequantize_row(W.ple_token_embd.type(), W.ple_token_embd.row(batch.tokens[static_cast<size_t>(t)]), tok, LP);
    for (int64_t i = 0; i < LP; ++i) in[i] *= proj_scale;
    for (int32_t il = 0; il < c.n_layer; ++il) rms_norm(in + il * P, W.ple_proj_norm.data(), in + il * P, P, c.rms_eps);
    for (int64_t i = 0; i < LP; ++i) in[i] = (in[i] + tok[i] * tok_scale) * input_scale;
  }
}

// After layer il's FFN: x += post_norm(proj(gelu(gate(x)) * ple_in_[il])), then x *= the layer's
// output scale.
void CpuBackend::per_layer_embedding(int32_t il, int32_t n) {
  const ModelConfig& c = model_->config;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int64_t E = c.n_embd, P = c.n_embd_per_layer, LP = P * c.n_layer;
  if (P > 0) {
    matmul_timed(L.ple_gate, x_.data(), n, ple_x_.data());
    for (int32_t t = 0; t < n; ++t) {
      float* g = &ple_x_[static_cast<size_t>(t * P)];
      const float* in = &ple_in_[static_cast<size_t>(t * LP + il * P)];
      for (int64_t i = 0; i < P; ++i) g[i] = gelu_tanh(g[i]) * in[i];
    }
    matmul_timed(L.ple_proj, ple_x_.data(), n, o_.data());
    for (int32_t t = 0; t < n; ++t) {
      float* ot = &o_[static_cast<size_t>(t * E)];
      rms_norm(ot, L.ple_post_norm.data(), ot, static_cast<int32_t>(E), c.rms_eps);
      float* xt = &x_[static_cast<size_t>(t * E)];
      for (int64_t i = 0; i < E; ++i) xt[i] += ot[i];
    }
  }
  if (L.out_scale != 1.0f)
    for (int64_t i = 0; i < static_cast<int64_t>(n) * E; ++i) x_[static_cast<size_t>(i)] *= L.out_scale;
}

}  // namespace kvscope
