// CpuBackend's mixture-of-experts FFN (llama.cpp's build_moe_ffn, CPU side): the router scores
// every expert per token, the top n_expert_used are chosen, and each chosen expert runs once over
// the rows of the tokens routed to it. Experts no token chose this step are never read.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu/affine.h"
#include "cpu/cpu_backend.h"
#include "cpu/ffn_activation.h"
#include "cpu/ops.h"

namespace kvscope {

namespace {

// Expert e's per-tensor scale, then its bias (gpt-oss), on every row: build_moe_ffn's order.
void scale_and_bias(float* y, int64_t rows, int64_t dim, const std::vector<float>& scales,
                    const std::vector<float>& biases, int32_t e) {
  if (!scales.empty()) {
    const float s = scales[static_cast<size_t>(e)];
    for (int64_t i = 0; i < rows * dim; ++i) y[i] *= s;
  }
  if (biases.empty()) return;
  const float* b = &biases[static_cast<size_t>(e) * static_cast<size_t>(dim)];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] += b[i];
}

// The router's scores of one token: softmax or sigmoid of the logits, or (SoftmaxOfChosen) the
// raw logits, softmaxed after the choice.
void expert_scores(MoeGating gating, const float* lg, int32_t n, float* probs) {
  if (gating == MoeGating::Softmax) {
    const float mx = *std::max_element(lg, lg + n);
    double sum = 0;
    for (int32_t e = 0; e < n; ++e) sum += probs[e] = std::exp(lg[e] - mx);
    for (int32_t e = 0; e < n; ++e) probs[e] = static_cast<float>(probs[e] / sum);
  } else if (gating == MoeGating::Sigmoid) {
    for (int32_t e = 0; e < n; ++e) probs[e] = 1.0f / (1.0f + std::exp(-lg[e]));
  } else {
    std::copy(lg, lg + n, probs);
  }
}

// Grouped routing: only the experts of the n_used groups with the best sums of their two best
// selection scores stay choosable (the others' scores become -inf).
void keep_best_groups(float* select, int32_t n_expert, int32_t n_group, int32_t n_used) {
  const int32_t per = n_expert / n_group;
  std::vector<float> score(static_cast<size_t>(n_group));
  for (int32_t g = 0; g < n_group; ++g) {
    float a = -INFINITY, b = -INFINITY;  // the two best of the group
    for (int32_t e = g * per; e < (g + 1) * per; ++e) {
      if (select[e] > a) {
        b = a;
        a = select[e];
      } else if (select[e] > b) {
        b = select[e];
      }
    }
    score[static_cast<size_t>(g)] = a + b;
  }
  std::vector<int32_t> order(static_cast<size_t>(n_group));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + n_used, order.end(), [&](int32_t x, int32_t y) {
    return score[static_cast<size_t>(x)] > score[static_cast<size_t>(y)];
  });
  for (int32_t k = n_used; k < n_group; ++k)
    for (int32_t e = order[static_cast<size_t>(k)] * per; e < (order[static_cast<size_t>(k)] + 1) * per; ++e)
      select[e] = -INFINITY;
}

}  // namespace

// Router probabilities, top-k choice and weights of every token into moe_.chosen / weights;
// moe_.routed[e] lists the (token, k) entries that chose expert e.
void CpuBackend::route_tokens(const MoeWeights& X, int32_t n) {
  const MoeConfig& m = model_->config.moe;
  const int32_t NE = m.n_expert, K = m.n_expert_used;
  moe_.logits.resize(static_cast<size_t>(n) * NE);
  matmul_timed(X.router, xn_.data(), n, moe_.logits.data());
  if (!X.router_bias.empty())
    for (int32_t t = 0; t < n; ++t)
      for (int32_t e = 0; e < NE; ++e)
        moe_.logits[static_cast<size_t>(t) * NE + e] += X.router_bias[static_cast<size_t>(e)];
  moe_.chosen.resize(static_cast<size_t>(n) * K);
  moe_.weights.resize(static_cast<size_t>(n) * K);
  moe_.routed.assign(static_cast<size_t>(NE), {});
  std::vector<float> probs(static_cast<size_t>(NE)), select(static_cast<size_t>(NE));
  std::vector<int32_t> order(static_cast<size_t>(NE));
  std::vector<float> chosen(2 * static_cast<size_t>(K));  // SoftmaxOfChosen: the k logits, then their softmax
  for (int32_t t = 0; t < n; ++t) {
    expert_scores(m.gating, &moe_.logits[static_cast<size_t>(t) * NE], NE, probs.data());
    // The selection bias (DeepSeek V3's, GLM-4.5's) steers the choice, not the weights.
    for (int32_t e = 0; e < NE; ++e)
      select[static_cast<size_t>(e)] =
          probs[static_cast<size_t>(e)] + (X.selection_bias.empty() ? 0.0f : X.selection_bias[static_cast<size_t>(e)]);
    if (m.n_group > 1) keep_best_groups(select.data(), NE, m.n_group, m.n_group_used);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t b) {
      return select[static_cast<size_t>(a)] > select[static_cast<size_t>(b)];
    });
    if (m.gating == MoeGating::SoftmaxOfChosen) {  // softmax over the k chosen logits only
      for (int32_t k = 0; k < K; ++k)
        chosen[static_cast<size_t>(k)] = probs[static_cast<size_t>(order[static_cast<size_t>(k)])];
      expert_scores(MoeGating::Softmax, chosen.data(), K, chosen.data() + K);
      for (int32_t k = 0; k < K; ++k)
        probs[static_cast<size_t>(order[static_cast<size_t>(k)])] = chosen[static_cast<size_t>(K + k)];
    }
    float sum = 0;
    for (int32_t k = 0; k < K; ++k) sum += probs[static_cast<size_t>(order[static_cast<size_t>(k)])];
    // llama.cpp clamps the sum to f16's smallest normal before dividing.
    const float norm = m.norm_weights ? 1.0f / std::max(sum, 6.103515625e-5f) : 1.0f;
    for (int32_t k = 0; k < K; ++k) {
      const int32_t e = order[static_cast<size_t>(k)];
      const size_t i = static_cast<size_t>(t) * K + k;
      moe_.chosen[i] = e;
      moe_.weights[i] = probs[static_cast<size_t>(e)] * norm * m.weights_scale;
      moe_.routed[static_cast<size_t>(e)].push_back(static_cast<int32_t>(i));
    }
  }
}

void CpuBackend::moe_ffn(const MoeWeights& X, int32_t n) {
  const ModelConfig& c = model_->config;
  const MoeConfig& m = c.moe;
  const int64_t E = c.n_embd, F = m.n_ff_exp, K = m.n_expert_used;
  route_tokens(X, n);
  std::fill(o_.begin(), o_.begin() + static_cast<int64_t>(n) * E, 0.0f);
  for (int32_t e = 0; e < m.n_expert; ++e) {
    const std::vector<int32_t>& rows = moe_.routed[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const int64_t r = static_cast<int64_t>(rows.size());
    moe_.x.resize(static_cast<size_t>(r * E));
    moe_.gate.resize(static_cast<size_t>(r * F));
    moe_.up.resize(static_cast<size_t>(r * F));
    moe_.out.resize(static_cast<size_t>(r * E));
    for (int64_t j = 0; j < r; ++j) {
      const float* src = &xn_[static_cast<size_t>(rows[static_cast<size_t>(j)] / K * E)];
      std::copy(src, src + E, &moe_.x[static_cast<size_t>(j * E)]);
    }
    const size_t ue = static_cast<size_t>(e);
    matmul_shared_timed({{&X.gate[ue], moe_.gate.data()}, {&X.up[ue], moe_.up.data()}}, moe_.x.data(), r);
    scale_and_bias(moe_.gate.data(), r, F, X.gate_scale, X.gate_bias, e);
    scale_and_bias(moe_.up.data(), r, F, X.up_scale, X.up_bias, e);
    ffn_activation_mul(c.traits.act, moe_.gate.data(), moe_.up.data(), r * F);
    matmul_timed(X.down[ue], moe_.gate.data(), r, moe_.out.data());
    scale_and_bias(moe_.out.data(), r, E, X.down_scale, X.down_bias, e);
    for (int64_t j = 0; j < r; ++j) {
      const int32_t i = rows[static_cast<size_t>(j)];
      const float w = moe_.weights[static_cast<size_t>(i)];
      float* dst = &o_[static_cast<size_t>(i / K * E)];
      const float* y = &moe_.out[static_cast<size_t>(j * E)];
      for (int64_t d = 0; d < E; ++d) dst[d] += w * y[d];
    }
  }
  if (X.shared_gate.data == nullptr) return;
  // The shared expert sees every token, like a dense FFN beside the routed ones.
  const int64_t S = X.shared_gate.ne(1);
  moe_.gate.resize(static_cast<size_t>(n * S));
  moe_.up.resize(static_cast<size_t>(n * S));
  moe_.out.resize(static_cast<size_t>(n * E));
  matmul_shared_timed({{&X.shared_gate, moe_.gate.data()}, {&X.shared_up, moe_.up.data()}}, xn_.data(), n);
  // qwen35moe's per-tensor scales (1 elsewhere: nothing to do)
  apply_affine(moe_.gate.data(), n, S, Affine{{}, X.shared_gate_scale}, AffineOrder::ScaleThenBias);
  apply_affine(moe_.up.data(), n, S, Affine{{}, X.shared_up_scale}, AffineOrder::ScaleThenBias);
  ffn_activation_mul(c.traits.act, moe_.gate.data(), moe_.up.data(), n * S);
  matmul_timed(X.shared_down, moe_.gate.data(), n, moe_.out.data());
  for (int32_t t = 0; t < n; ++t) {
    // qwen35moe: the shared expert's output is also scaled by sigmoid(shared_router . x).
    const float* xt = &xn_[static_cast<size_t>(t * E)];
    float w = X.shared_down_scale;
    if (!X.shared_router.empty()) {
      float z = 0.0f;
      for (int64_t d = 0; d < E; ++d) z += X.shared_router[static_cast<size_t>(d)] * xt[d];
      w *= sigmoid(z);
    }
    float* ot = &o_[static_cast<size_t>(t * E)];
    const float* y = &moe_.out[static_cast<size_t>(t * E)];
    for (int64_t d = 0; d < E; ++d) ot[d] += w * y[d];
  }
}

}  // namespace kvscope
