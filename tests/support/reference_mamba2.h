#pragma once
// The oracle for Granite 4.0-H's Mamba-2 layers (Mamba2Config), written from the selective
// state-space recurrence (Dao and Gu, "Transformers are SSMs", arXiv 2405.21060, as llama.cpp's
// build_mamba2_layer wires it) rather than as the engine runs it: every past [x; B; C] row kept,
// the convolution taken over them, and per head the state h (head_dim x d_state) in double,
// updated as h <- exp(dt A) h + dt x B^T and read as y = h C + D x.
#include <cmath>
#include <vector>

#include "model/model.h"

namespace kvscope::test {

class ReferenceMamba2 {
 public:
  explicit ReferenceMamba2(const ModelConfig& c) : c_(c), hist_(static_cast<size_t>(c.n_layer)), h_(hist_.size()) {}

  // One token through layer il from its in_proj row [z; xBC; dt] (already scaled): the gated,
  // group-normed output (d_inner).
  std::vector<float> step(int32_t il, const Mamba2Weights& M, const std::vector<float>& row) {
    const Mamba2Config& m = c_.mamba2;
    const int32_t K = m.conv_kernel, N = m.d_state, HD = m.head_dim();
    const int64_t C = m.conv_channels(), DI = m.d_inner;
    auto& hist = hist_[static_cast<size_t>(il)];
    hist.emplace_back(row.begin() + DI, row.begin() + DI + C);
    std::vector<double> xbc(static_cast<size_t>(C));
    for (int64_t ch = 0; ch < C; ++ch) {  // tap k sees the input K - 1 - k tokens back
      double sum = M.conv_bias.empty() ? 0.0 : M.conv_bias[static_cast<size_t>(ch)];
      for (int32_t k = 0; k < K; ++k) {
        const int64_t at = static_cast<int64_t>(hist.size()) - 1 - (K - 1 - k);
        if (at >= 0) sum += static_cast<double>(M.conv_kernel[static_cast<size_t>(ch * K + k)]) * hist[at][ch];
      }
      xbc[static_cast<size_t>(ch)] = sum / (1.0 + std::exp(-sum));
    }
    auto& h = h_[static_cast<size_t>(il)];
    if (h.empty()) h.assign(static_cast<size_t>(DI) * N, 0.0);
    std::vector<double> y(static_cast<size_t>(DI));
    for (int32_t head = 0; head < m.n_heads; ++head) {
      const double raw =
          row[static_cast<size_t>(DI + C + head)] + static_cast<double>(M.dt_bias[static_cast<size_t>(head)]);
      const double dt = std::log1p(std::exp(raw)), decay = std::exp(dt * M.a[static_cast<size_t>(head)]);
      const int32_t g = head / (m.n_heads / m.n_groups);
      const double* B = &xbc[static_cast<size_t>(DI + g * N)];
      const double* Cg = &xbc[static_cast<size_t>(DI + static_cast<int64_t>(m.n_groups) * N + g * N)];
      for (int32_t i = 0; i < HD; ++i) {
        const int64_t d = static_cast<int64_t>(head) * HD + i;
        double acc = 0;
        for (int32_t k = 0; k < N; ++k) {
          double& s = h[static_cast<size_t>(d * N + k)];
          s = s * decay + dt * xbc[static_cast<size_t>(d)] * B[k];
          acc += s * Cg[k];
        }
        const double z = row[static_cast<size_t>(d)];
        y[static_cast<size_t>(d)] =
            (acc + xbc[static_cast<size_t>(d)] * M.d[static_cast<size_t>(head)]) * z / (1.0 + std::exp(-z));
      }
    }
    std::vector<float> out(static_cast<size_t>(DI));
    const int64_t G = DI / m.n_groups;
    for (int64_t g = 0; g < m.n_groups; ++g) {  // RMSNorm per group
      double ss = 0;
      for (int64_t i = 0; i < G; ++i) ss += y[static_cast<size_t>(g * G + i)] * y[static_cast<size_t>(g * G + i)];
      const double inv = 1.0 / std::sqrt(ss / G + c_.rms_eps);
      for (int64_t i = 0; i < G; ++i)
        out[static_cast<size_t>(g * G + i)] =
            static_cast<float>(y[static_cast<size_t>(g * G + i)] * inv * M.norm[static_cast<size_t>(g * G + i)]);
    }
    return out;
  }

 private:
  const ModelConfig& c_;
  std::vector<std::vector<std::vector<float>>> hist_;  // [layer][past token][conv_channels] xBC rows
  std::vector<std::vector<double>> h_;                 // [layer][d_inner][d_state]
};

}  // namespace kvscope::test
