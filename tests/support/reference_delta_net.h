#pragma once
// The oracle for Qwen3.5's Gated DeltaNet layers (GdnConfig), written from the recurrence's
// definition (Yang et al., "Gated Delta Networks", arXiv 2412.06464, as llama.cpp's qwen35 graph
// wires it) rather than as the engine runs it: every past in_proj row kept, the convolution
// taken over them, and per value head the state S (d_state x d_state, key dim by value dim) in
// double, updated as S <- exp(g) S, then S <- S + k (beta (v - S^T k))^T, read as S^T q.
#include <cmath>
#include <vector>

#include "model/model.h"

namespace kvscope::test {

class ReferenceDeltaNet {
 public:
  explicit ReferenceDeltaNet(const ModelConfig& c) : c_(c), hist_(static_cast<size_t>(c.n_layer)), S_(hist_.size()) {}

  // One token through layer il: mix = in_proj row, z = the output gate row, alpha and beta one
  // value per value head (all already scaled). Returns the gated, normed heads (value_dim).
  std::vector<float> step(int32_t il, const GdnWeights& G, const std::vector<float>& mix, const std::vector<float>& z,
                          const std::vector<float>& alpha, const std::vector<float>& beta) {
    const GdnConfig& g = c_.gdn;
    const int32_t D = g.d_state, K = g.conv_kernel;
    const int64_t C = g.conv_channels();
    auto& hist = hist_[static_cast<size_t>(il)];
    hist.push_back(mix);
    std::vector<double> x(static_cast<size_t>(C));
    for (int64_t ch = 0; ch < C; ++ch) {  // tap k sees the input K - 1 - k tokens back
      double sum = 0;
      for (int32_t k = 0; k < K; ++k) {
        const int64_t at = static_cast<int64_t>(hist.size()) - 1 - (K - 1 - k);
        if (at >= 0) sum += static_cast<double>(G.conv_kernel[static_cast<size_t>(ch * K + k)]) * hist[at][ch];
      }
      x[static_cast<size_t>(ch)] = sum / (1.0 + std::exp(-sum));
    }
    for (int64_t h = 0; h < 2 * g.n_k_heads; ++h) l2_normalize(&x[static_cast<size_t>(h * D)], D);
    auto& S = S_[static_cast<size_t>(il)];
    if (S.empty()) S.assign(static_cast<size_t>(g.n_v_heads) * D * D, 0.0);
    std::vector<float> out(static_cast<size_t>(g.value_dim()));
    for (int32_t h = 0; h < g.n_v_heads; ++h) {
      const double* q = &x[static_cast<size_t>((h % g.n_k_heads) * D)];
      const double* k = q + g.key_dim();
      const double* v = &x[static_cast<size_t>(2 * g.key_dim() + h * D)];
      const double a = alpha[static_cast<size_t>(h)] + static_cast<double>(G.dt_bias[static_cast<size_t>(h)]);
      const double decay = std::exp(std::log1p(std::exp(a)) * G.a[static_cast<size_t>(h)]);
      const double b = 1.0 / (1.0 + std::exp(-static_cast<double>(beta[static_cast<size_t>(h)])));
      double* Sh = &S[static_cast<size_t>(h) * D * D];  // Sh[i * D + j]: key dim i, value dim j
      for (int64_t i = 0; i < static_cast<int64_t>(D) * D; ++i) Sh[i] *= decay;
      std::vector<double> delta(static_cast<size_t>(D));
      for (int32_t j = 0; j < D; ++j) {
        double kv = 0;
        for (int32_t i = 0; i < D; ++i) kv += Sh[i * D + j] * k[i];
        delta[static_cast<size_t>(j)] = (v[j] - kv) * b;
      }
      for (int32_t i = 0; i < D; ++i)
        for (int32_t j = 0; j < D; ++j) Sh[i * D + j] += k[i] * delta[static_cast<size_t>(j)];
      std::vector<double> o(static_cast<size_t>(D));
      double ss = 0;
      for (int32_t j = 0; j < D; ++j) {
        double acc = 0;
        for (int32_t i = 0; i < D; ++i) acc += Sh[i * D + j] * q[i];
        o[static_cast<size_t>(j)] = acc / std::sqrt(static_cast<double>(D));
        ss += o[static_cast<size_t>(j)] * o[static_cast<size_t>(j)];
      }
      const double inv = 1.0 / std::sqrt(ss / D + c_.rms_eps);
      for (int32_t j = 0; j < D; ++j) {
        const double zj = z[static_cast<size_t>(h * D + j)];
        out[static_cast<size_t>(h * D + j)] = static_cast<float>(
            o[static_cast<size_t>(j)] * inv * G.norm[static_cast<size_t>(j)] * zj / (1.0 + std::exp(-zj)));
      }
    }
    return out;
  }

 private:
  void l2_normalize(double* v, int32_t n) const {
    double ss = 0;
    for (int32_t i = 0; i < n; ++i) ss += v[i] * v[i];
    const double inv = 1.0 / std::sqrt(ss + c_.rms_eps);
    for (int32_t i = 0; i < n; ++i) v[i] *= inv;
  }

  const ModelConfig& c_;
  std::vector<std::vector<std::vector<float>>> hist_;  // [layer][past token][conv_channels] in_proj rows
  std::vector<std::vector<double>> S_;                 // [layer][value head][d_state][d_state]
};

}  // namespace kvscope::test
