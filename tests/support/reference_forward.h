#pragma once
// The oracle: a plain, obviously-correct forward pass. Contiguous per-sequence KV cache,
// weights dequantized to f32 once, scalar loops with double accumulation, no batching, no
// paging, no threads. Every optimisation of the real engine is compared against this.
#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "model/model.h"
#include "reference_delta_net.h"
#include "reference_mamba2.h"

namespace kvscope::test {

// Where RoPE turns a head vector. TextPosition: q and k at their text positions, keys cached
// rotated (the plain forward). CachePosition (StreamingLLM's attention sinks): keys are cached
// un-rotated; for a query at text position pos the visible positions are
// vis = [0, min(S, lo)) ++ [lo, pos] with lo = pos - W + 1; the key vis[t] is rotated to position
// t and the query to position vis.size() - 1, in double.
enum class RopeAt { TextPosition, CachePosition };

class ReferenceForward {
 public:
  // sliding_sinks false: a model's own sliding-window layers see no sinks (--sinks-layers global).
  explicit ReferenceForward(std::shared_ptr<const Model> m, int32_t window = 0, int32_t sinks = 0,
                            RopeAt rope_at = RopeAt::TextPosition, bool sliding_sinks = true)
      : m_(std::move(m)), window_(window), sinks_(sinks), rope_at_(rope_at), sliding_sinks_(sliding_sinks) {
    const ModelConfig& c = m_->config;
    k_.resize(static_cast<size_t>(c.n_layer));
    v_.resize(static_cast<size_t>(c.n_layer));
    conv_hist_.resize(static_cast<size_t>(c.n_layer));
    delta_net_ = std::make_unique<ReferenceDeltaNet>(c);
    mamba2_ = std::make_unique<ReferenceMamba2>(c);
  }

  // Feeds one token at the next position; returns its logits.
  std::vector<float> step(TokenId tok) {
    const ModelConfig& c = m_->config;
    const ModelWeights& W = m_->weights;
    const int32_t pos = n_past_++;
    const int32_t E = c.n_embd;
    std::vector<float> x = row(W.token_embd, tok);
    if (c.traits.embed_scale)
      for (auto& v : x) v *= std::sqrt(static_cast<float>(E));
    if (c.embedding_scale != 0.0f)  // granite
      for (auto& v : x) v *= c.embedding_scale;
    const std::vector<float> ple = per_layer_inputs(tok, x);
    for (int32_t il = 0; il < c.n_layer; ++il) {
      const LayerWeights& L = W.layers[static_cast<size_t>(il)];
      std::vector<float> xn = norm(x, L.attn_norm);
      std::vector<float> o;
      if (c.layer_is_recurrent(il)) {
        o = c.traits.gated_delta_net ? delta_net(il, L, xn)
            : c.traits.mamba2        ? mamba2(il, L, xn)
                                     : short_conv(il, L, xn);
      } else {
        const std::vector<float> att =
            c.latent_kv() ? latent_attend(il, pos, L, xn) : attend_heads(il, pos, L, xn, c.layer_head_dim(il));
        o = affine(matvec(L.wo, att), L.ao, true);
      }
      if (c.traits.post_norms) o = norm(o, L.post_attn_norm);
      const float rs = c.residual_scale != 0.0f ? c.residual_scale : 1.0f;  // granite
      for (int32_t i = 0; i < E; ++i) x[static_cast<size_t>(i)] += rs * o[static_cast<size_t>(i)];
      xn = norm(x, L.ffn_norm);
      o = L.moe ? moe(L.experts, xn) : ffn(L.w_gate, L.w_up, L.w_down, xn, &L);
      if (c.traits.post_norms) o = norm(o, L.post_ffw_norm);
      for (int32_t i = 0; i < E; ++i) x[static_cast<size_t>(i)] += rs * o[static_cast<size_t>(i)];
      if (!ple.empty()) per_layer_embedding(il, L, ple, x);
      for (float& v : x) v *= L.out_scale;
    }
    std::vector<float> logits = matvec(W.output, norm(x, W.output_norm));
    if (c.logit_scale != 0.0f)  // granite
      for (float& v : logits) v /= c.logit_scale;
    if (c.final_softcap > 0)
      for (float& v : logits)
        v = static_cast<float>(c.final_softcap * std::tanh(v / static_cast<double>(c.final_softcap)));
    return logits;
  }

 private:
  // lfm2's short convolution from its definition: B, C, x = in_proj(xn); each channel convolves
  // its past B*x values (the layer's history, from zero) and this token's with the kernel, in
  // double; out_proj(C * that).
  std::vector<float> short_conv(int32_t il, const LayerWeights& L, const std::vector<float>& xn) {
    const ModelConfig& c = m_->config;
    const int32_t E = c.n_embd, K = c.conv_l_cache;
    const std::vector<float> bcx = matvec(L.conv_in, xn);
    auto& hist = conv_hist_[static_cast<size_t>(il)];  // [past token][E], newest last
    std::vector<float> bx(static_cast<size_t>(E)), y(static_cast<size_t>(E));
    for (int32_t e = 0; e < E; ++e)
      bx[static_cast<size_t>(e)] = bcx[static_cast<size_t>(e)] * bcx[static_cast<size_t>(2 * E + e)];
    hist.push_back(bx);
    for (int32_t e = 0; e < E; ++e) {
      double sum = 0;
      for (int32_t k = 0; k < K; ++k) {  // tap k sees the input K - 1 - k tokens back
        const int64_t back = K - 1 - k, at = static_cast<int64_t>(hist.size()) - 1 - back;
        if (at >= 0)
          sum += static_cast<double>(L.conv_kernel[static_cast<size_t>(e * K + k)]) *
                 hist[static_cast<size_t>(at)][static_cast<size_t>(e)];
      }
      y[static_cast<size_t>(e)] = static_cast<float>(bcx[static_cast<size_t>(E + e)] * sum);
    }
    return matvec(L.conv_out, y);
  }

  // qwen35's Gated DeltaNet layer: the projections here, the recurrence in ReferenceDeltaNet.
  std::vector<float> delta_net(int32_t il, const LayerWeights& L, const std::vector<float>& xn) {
    const GdnWeights& G = L.gdn;
    auto scaled = [&](const TensorView& w, float s) { return affine(matvec(w, xn), Affine{{}, s}, true); };
    const std::vector<float> y =
        delta_net_->step(il, G, scaled(G.in_proj, G.in_scale), scaled(G.z_proj, G.z_scale),
                         scaled(G.alpha_proj, G.alpha_scale), scaled(G.beta_proj, G.beta_scale));
    return affine(matvec(G.out_proj, y), Affine{{}, G.out_scale}, true);
  }

  // granitehybrid's Mamba-2 layer: the projections here, the recurrence in ReferenceMamba2.
  std::vector<float> mamba2(int32_t il, const LayerWeights& L, const std::vector<float>& xn) {
    const Mamba2Weights& M = L.mamba2;
    const std::vector<float> y = mamba2_->step(il, M, affine(matvec(M.in_proj, xn), Affine{{}, M.in_scale}, true));
    return affine(matvec(M.out_proj, y), Affine{{}, M.out_scale}, true);
  }

  // gemma4's per-layer inputs of one token, from the definition: [n_layer][n_embd_per_layer]
  // (empty without them).
  std::vector<float> per_layer_inputs(TokenId tok, const std::vector<float>& x) const {
    const ModelConfig& c = m_->config;
    const ModelWeights& W = m_->weights;
    const int32_t P = c.n_embd_per_layer;
    if (P == 0) return {};
    const std::vector<float> proj = matvec(W.ple_model_proj, x), tok_row = row(W.ple_token_embd, tok);
    std::vector<float> out(proj.size());
    for (int32_t il = 0; il < c.n_layer; ++il) {
      std::vector<float> v(static_cast<size_t>(P));
      for (int32_t i = 0; i < P; ++i)
        v[static_cast<size_t>(i)] = proj[static_cast<size_t>(il * P + i)] / std::sqrt(1.0 * c.n_embd);
      v = norm(v, W.ple_proj_norm);
      for (int32_t i = 0; i < P; ++i) {
        const size_t k = static_cast<size_t>(il * P + i);
        out[k] = static_cast<float>((v[static_cast<size_t>(i)] + tok_row[k] * std::sqrt(1.0 * P)) / std::sqrt(2.0));
      }
    }
    return out;
  }
  // x += post_norm(proj(gelu(gate x) * the layer's input)).
  void per_layer_embedding(int32_t il, const LayerWeights& L, const std::vector<float>& ple,
                           std::vector<float>& x) const {
    const int32_t P = m_->config.n_embd_per_layer;
    std::vector<float> g = matvec(L.ple_gate, x);
    for (int32_t i = 0; i < P; ++i) {
      const double v = g[static_cast<size_t>(i)];
      g[static_cast<size_t>(i)] = static_cast<float>(act_gelu(v) * ple[static_cast<size_t>(il * P + i)]);
    }
    const std::vector<float> y = norm(matvec(L.ple_proj, g), L.ple_post_norm);
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  static double act_gelu(double g) {
    return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * g * (1.0 + 0.044715 * g * g)));
  }

  // q, k, v of the token at pos (k and v cached), then its attention. A layer that borrows KV
  // (gemma4) computes q only and reads its source layer's cache.
  std::vector<float> attend_heads(int32_t il, int32_t pos, const LayerWeights& L, const std::vector<float>& xn,
                                  int32_t D) {
    const ModelConfig& c = m_->config;
    std::vector<float> q = affine(matvec(L.wq, xn), L.aq, true), gate;
    if (c.traits.attn_output_gate) {  // qwen35: [q_h, gate_h] per head
      std::vector<float> qs;
      for (int32_t h = 0; h < c.n_head; ++h) {
        qs.insert(qs.end(), q.begin() + 2 * h * D, q.begin() + (2 * h + 1) * D);
        gate.insert(gate.end(), q.begin() + (2 * h + 1) * D, q.begin() + (2 * h + 2) * D);
      }
      q = qs;
    }
    const float base = c.layer_is_swa(il) ? c.rope_base_swa : c.rope_base;
    const bool rope_now = rope_at_ == RopeAt::TextPosition && c.layer_has_rope(il);
    for (int32_t h = 0; h < c.n_head; ++h) head_prep(il, &q[static_cast<size_t>(h * D)], L.q_norm, pos, base, rope_now);
    if (c.layer_owns_kv(il)) {
      std::vector<float> k = affine(matvec(L.wk, xn), L.ak, true), v = affine(matvec(L.wv, xn), L.av, true);
      for (int32_t h = 0; h < c.layer_n_head_kv(il); ++h) {
        head_prep(il, &k[static_cast<size_t>(h * D)], L.k_norm, pos, base, rope_now);
        if (c.traits.per_layer_shapes) {  // gemma4: V RMS-normed without a weight
          std::vector<float> vh(v.begin() + h * D, v.begin() + (h + 1) * D);
          vh = norm(vh, {});
          std::copy(vh.begin(), vh.end(), v.begin() + h * D);
        }
      }
      auto& K = k_[static_cast<size_t>(il)];
      auto& V = v_[static_cast<size_t>(il)];
      K.insert(K.end(), k.begin(), k.end());
      V.insert(V.end(), v.begin(), v.end());
    }
    std::vector<float> att = attend(il, pos, q, base);
    for (size_t i = 0; i < gate.size(); ++i)
      att[i] = static_cast<float>(att[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))));
    return att;
  }

  // Latent attention (model_config.h MlaConfig) from its definition, NOT as the engine runs it:
  // every head's key [k_b_h^T c | RoPE key] and value v_b_h c are decompressed from the latent c
  // and cached per head, then plain multi-head attention (head width qk_nope + rope for q.k,
  // v_dim for the values). The engine's absorbed form must give the same numbers.
  std::vector<float> latent_attend(int32_t il, int32_t pos, const LayerWeights& L, const std::vector<float>& xn) {
    const ModelConfig& c = m_->config;
    const MlaConfig& m = c.mla;
    const int32_t H = c.n_head, N = m.qk_nope, P = c.rope_dim, QK = N + P, R = m.kv_lora_rank, VD = m.v_dim;
    std::vector<float> q =
        L.mla.wq_a.data ? matvec(L.mla.wq_b, norm(matvec(L.mla.wq_a, xn), L.mla.q_a_norm)) : matvec(L.wq, xn);
    const std::vector<float> kv = matvec(L.mla.wkv_a, xn);
    const std::vector<float> lat = norm(std::vector<float>(kv.begin(), kv.begin() + R), L.mla.kv_a_norm);
    std::vector<float> k_pe(kv.begin() + R, kv.end());
    const bool rope_now = rope_at_ == RopeAt::TextPosition;
    head_prep(il, k_pe.data(), {}, pos, c.rope_base, rope_now);
    auto& K = k_[static_cast<size_t>(il)];
    auto& V = v_[static_cast<size_t>(il)];
    for (int32_t h = 0; h < H; ++h) {
      std::vector<double> k_nope(static_cast<size_t>(N), 0.0);  // k_b_h^T c: k_b_h is R rows of N
      for (int32_t r = 0; r < R; ++r) {
        const std::vector<float> kb = row(L.mla.k_b[static_cast<size_t>(h)], r);
        for (int32_t i = 0; i < N; ++i)
          k_nope[static_cast<size_t>(i)] +=
              static_cast<double>(kb[static_cast<size_t>(i)]) * lat[static_cast<size_t>(r)];
      }
      for (double v : k_nope) K.push_back(static_cast<float>(v));
      K.insert(K.end(), k_pe.begin(), k_pe.end());
      const std::vector<float> vh = matvec(L.mla.v_b[static_cast<size_t>(h)], lat);
      V.insert(V.end(), vh.begin(), vh.end());
      head_prep(il, &q[static_cast<size_t>(h * QK + N)], {}, pos, c.rope_base, rope_now);
    }
    const std::vector<int32_t> vis = visible(il, pos);
    const int32_t n = static_cast<int32_t>(vis.size());
    std::vector<float> att(static_cast<size_t>(H * VD), 0.0f);
    for (int32_t h = 0; h < H; ++h) {
      const float* qh = &q[static_cast<size_t>(h * QK)];
      const std::vector<double> qr =
          rope_now ? std::vector<double>(qh, qh + QK) : rotated(il, qh, QK, N, n - 1, c.rope_base);
      std::vector<double> s(vis.size());
      double mx = -1e300;
      for (int32_t t = 0; t < n; ++t) {
        const float* kh = &K[static_cast<size_t>((vis[static_cast<size_t>(t)] * H + h) * QK)];
        const std::vector<double> kr =
            rope_now ? std::vector<double>(kh, kh + QK) : rotated(il, kh, QK, N, t, c.rope_base);
        double d = 0;
        for (int32_t i = 0; i < QK; ++i) d += qr[static_cast<size_t>(i)] * kr[static_cast<size_t>(i)];
        s[static_cast<size_t>(t)] = d * c.attn_scale;
        mx = std::max(mx, s[static_cast<size_t>(t)]);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int32_t i = 0; i < VD; ++i) {
        double acc = 0;
        for (int32_t t = 0; t < n; ++t)
          acc +=
              s[static_cast<size_t>(t)] / sum * V[static_cast<size_t>((vis[static_cast<size_t>(t)] * H + h) * VD + i)];
        att[static_cast<size_t>(h * VD + i)] = static_cast<float>(acc);
      }
    }
    return att;
  }

  // The positions a query at pos sees in layer il: [0, min(sinks, lo)) then [lo, pos].
  std::vector<int32_t> visible(int32_t il, int32_t pos) const {
    const ModelConfig& c = m_->config;
    int32_t win = window_;
    if (c.layer_is_swa(il) && c.sliding_window > 0) win = win == 0 ? c.sliding_window : std::min(win, c.sliding_window);
    std::vector<int32_t> vis;
    const int32_t lo = win > 0 ? std::max(0, pos - win + 1) : 0;
    const int32_t sinks = c.layer_is_swa(il) && c.sliding_window > 0 && !sliding_sinks_ ? 0 : sinks_;
    for (int32_t j = 0; j < (win > 0 ? std::min(sinks, lo) : 0); ++j) vis.push_back(j);
    for (int32_t j = lo; j <= pos; ++j) vis.push_back(j);
    return vis;
  }

  // Attention of every query head of the token at pos against layer il's cached keys.
  std::vector<float> attend(int32_t il, int32_t pos, const std::vector<float>& q, float base) const {
    const ModelConfig& c = m_->config;
    const int32_t D = c.layer_head_dim(il), n_kv = c.layer_n_head_kv(il);
    const auto& K = k_[static_cast<size_t>(c.kv_source(il))];
    const auto& V = v_[static_cast<size_t>(c.kv_source(il))];
    const std::vector<int32_t> vis = visible(il, pos);
    const int32_t n = static_cast<int32_t>(vis.size());
    const bool at_cache = rope_at_ == RopeAt::CachePosition && c.layer_has_rope(il);
    std::vector<float> att(static_cast<size_t>(c.layer_q_dim(il)), 0.0f);
    for (int32_t h = 0; h < c.n_head; ++h) {
      const int32_t g = h / (c.n_head / n_kv);
      const float* qh = &q[static_cast<size_t>(h * D)];
      const std::vector<double> qr = at_cache ? rotated(il, qh, D, 0, n - 1, base) : std::vector<double>();
      std::vector<double> s(vis.size());
      double mx = -1e300;
      for (int32_t t = 0; t < n; ++t) {
        const float* kh = &K[static_cast<size_t>((vis[static_cast<size_t>(t)] * n_kv + g) * D)];
        double d = 0;
        if (at_cache) {
          const std::vector<double> kr = rotated(il, kh, D, 0, t, base);
          for (int32_t i = 0; i < D; ++i) d += qr[static_cast<size_t>(i)] * kr[static_cast<size_t>(i)];
        } else {
          for (int32_t i = 0; i < D; ++i) d += static_cast<double>(qh[i]) * kh[i];
        }
        s[static_cast<size_t>(t)] = d * c.attn_scale;
        mx = std::max(mx, s[static_cast<size_t>(t)]);
      }
      // gpt-oss's learned sink: one more logit in the denominator, with no value.
      const std::vector<float>& sinks = m_->weights.layers[static_cast<size_t>(il)].attn_sinks;
      const double sink = sinks.empty() ? -INFINITY : sinks[static_cast<size_t>(h)];
      mx = std::max(mx, sink);
      double sum = sinks.empty() ? 0.0 : std::exp(sink - mx);
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int32_t i = 0; i < D; ++i) {
        double acc = 0;
        for (int32_t t = 0; t < n; ++t)
          acc += s[static_cast<size_t>(t)] / sum *
                 V[static_cast<size_t>((vis[static_cast<size_t>(t)] * n_kv + g) * D + i)];
        att[static_cast<size_t>(h * D + i)] = static_cast<float>(acc);
      }
    }
    return att;
  }
  // y * scale + bias (attention) or (y + bias) * scale (FFN), as llama.cpp orders them.
  static std::vector<float> affine(std::vector<float> y, const Affine& a, bool scale_first) {
    for (size_t i = 0; i < y.size(); ++i) {
      const double b = a.bias.empty() ? 0.0 : a.bias[i];
      y[i] = static_cast<float>(scale_first ? y[i] * static_cast<double>(a.scale) + b : (y[i] + b) * a.scale);
    }
    return y;
  }
  // act(gate x) * (up x), then down; L (dense layers) adds mistral3's biases and scales.
  std::vector<float> ffn(const TensorView& wg, const TensorView& wu, const TensorView& wd, const std::vector<float>& xn,
                         const LayerWeights* L) const {
    const Affine none;
    std::vector<float> gt = affine(matvec(wg, xn), L ? L->a_gate : none, false);
    const std::vector<float> up = affine(matvec(wu, xn), L ? L->a_up : none, false);
    for (size_t i = 0; i < gt.size(); ++i) gt[i] = static_cast<float>(act(gt[i], up[i]));
    return affine(matvec(wd, gt), L ? L->a_down : none, false);
  }
  // act(gate) * up from each activation's definition.
  double act(double g, double u) const {
    switch (m_->config.traits.act) {
      case FfnActivation::Silu:
        return g / (1.0 + std::exp(-g)) * u;
      case FfnActivation::GeluTanh:
        return 0.5 * g * (1.0 + std::tanh(0.7978845608028654 * g * (1.0 + 0.044715 * g * g))) * u;
      case FfnActivation::SwigluOai: {
        const double x = std::min(g, 7.0), y = std::clamp(u, -7.0, 7.0);
        return x / (1.0 + std::exp(-1.702 * x)) * (y + 1.0);
      }
    }
    return 0;
  }
  // The MoE FFN from its definition: every expert's score, the top k, their weighted outputs.
  std::vector<float> moe(const MoeWeights& X, const std::vector<float>& xn) const {
    const MoeConfig& m = m_->config.moe;
    std::vector<float> logits = matvec(X.router, xn);
    for (size_t e = 0; e < X.router_bias.size(); ++e) logits[e] += X.router_bias[e];
    std::vector<double> p(logits.begin(), logits.end());
    if (m.gating == MoeGating::SoftmaxOfChosen) {
      // Handled below, after the choice.
    } else if (m.gating == MoeGating::Softmax) {
      const double mx = *std::max_element(p.begin(), p.end());
      double sum = 0;
      for (double& v : p) sum += (v = std::exp(v - mx));
      for (double& v : p) v /= sum;
    } else {
      for (double& v : p) v = 1.0 / (1.0 + std::exp(-v));
    }
    std::vector<int32_t> order(p.size());
    for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int32_t>(e);
    auto sel = [&](int32_t e) {
      return p[static_cast<size_t>(e)] + (X.selection_bias.empty() ? 0.0 : X.selection_bias[static_cast<size_t>(e)]);
    };
    if (m.n_group > 1) {  // grouped routing: experts outside the best groups cannot be chosen
      const int32_t per = m.n_expert / m.n_group;
      std::vector<std::pair<double, int32_t>> groups;
      for (int32_t g = 0; g < m.n_group; ++g) {
        std::vector<double> v;
        for (int32_t e = g * per; e < (g + 1) * per; ++e) v.push_back(sel(e));
        std::sort(v.rbegin(), v.rend());
        groups.push_back({v[0] + v[1], g});
      }
      std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      std::vector<int32_t> kept;
      for (int32_t k = 0; k < m.n_group_used; ++k)
        for (int32_t e = groups[static_cast<size_t>(k)].second * per;
             e < (groups[static_cast<size_t>(k)].second + 1) * per; ++e)
          kept.push_back(e);
      order = kept;
    }
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sel(a) > sel(b); });
    if (m.gating == MoeGating::SoftmaxOfChosen) {
      const double mx = p[static_cast<size_t>(order[0])];
      double z = 0;
      for (int32_t k = 0; k < m.n_expert_used; ++k)
        z += std::exp(p[static_cast<size_t>(order[static_cast<size_t>(k)])] - mx);
      for (int32_t k = 0; k < m.n_expert_used; ++k) {
        double& v = p[static_cast<size_t>(order[static_cast<size_t>(k)])];
        v = std::exp(v - mx) / z;
      }
    }
    double wsum = 0;
    for (int32_t k = 0; k < m.n_expert_used; ++k) wsum += p[static_cast<size_t>(order[static_cast<size_t>(k)])];
    std::vector<float> out(xn.size(), 0.0f);
    for (int32_t k = 0; k < m.n_expert_used; ++k) {
      const size_t e = static_cast<size_t>(order[static_cast<size_t>(k)]);
      double w = p[e] * m.weights_scale;
      if (m.norm_weights) w /= std::max(wsum, 6.103515625e-5);
      const Affine sg{{}, X.gate_scale.empty() ? 1.0f : X.gate_scale[e]},
          su{{}, X.up_scale.empty() ? 1.0f : X.up_scale[e]}, sd{{}, X.down_scale.empty() ? 1.0f : X.down_scale[e]};
      std::vector<float> gt = add_row(affine(matvec(X.gate[e], xn), sg, true), X.gate_bias, e);
      const std::vector<float> up = add_row(affine(matvec(X.up[e], xn), su, true), X.up_bias, e);
      for (size_t i = 0; i < gt.size(); ++i) gt[i] = static_cast<float>(act(gt[i], up[i]));
      const std::vector<float> y = add_row(affine(matvec(X.down[e], gt), sd, true), X.down_bias, e);
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(out[i] + w * y[i]);
    }
    if (X.shared_gate.data) {  // qwen35moe: scaled matrices, output times sigmoid(shared_router . x)
      std::vector<float> gt = affine(matvec(X.shared_gate, xn), Affine{{}, X.shared_gate_scale}, true);
      const std::vector<float> up = affine(matvec(X.shared_up, xn), Affine{{}, X.shared_up_scale}, true);
      for (size_t i = 0; i < gt.size(); ++i) gt[i] = static_cast<float>(act(gt[i], up[i]));
      const std::vector<float> y = affine(matvec(X.shared_down, gt), Affine{{}, X.shared_down_scale}, true);
      double w = 1.0;
      if (!X.shared_router.empty()) {
        double zr = 0;
        for (size_t i = 0; i < xn.size(); ++i) zr += static_cast<double>(X.shared_router[i]) * xn[i];
        w = 1.0 / (1.0 + std::exp(-zr));
      }
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(out[i] + w * y[i]);
    }
    return out;
  }
  // y + row e of a [n_expert][y.size()] bias table (none when empty).
  static std::vector<float> add_row(std::vector<float> y, const std::vector<float>& table, size_t e) {
    for (size_t i = 0; i < y.size() && !table.empty(); ++i) y[i] += table[e * y.size() + i];
    return y;
  }
  // RoPE of one head vector (len values, the rotated ones from `off`) to position p, in double,
  // from the definition (CachePosition).
  std::vector<double> rotated(int32_t il, const float* head, int32_t len, int32_t off, int32_t p, float base) const {
    const ModelConfig& c = m_->config;
    std::vector<double> r(head, head + len);
    const float* h = head + off;
    const int32_t half = c.layer_rope_dim(il) / 2;
    const float* factors = c.layer_rope_factors(il);
    for (int32_t i = 0; i < half; ++i) {
      const auto [theta, mag] = rope_angle(i, p, base, factors ? factors[i] : 1.0, 2 * half);
      const int32_t a = c.traits.rope == RopeStyle::Normal ? 2 * i : i;
      const int32_t b = c.traits.rope == RopeStyle::Normal ? 2 * i + 1 : i + half;
      const double x0 = h[a], x1 = h[b];
      r[static_cast<size_t>(off + a)] = mag * (x0 * std::cos(theta) - x1 * std::sin(theta));
      r[static_cast<size_t>(off + b)] = mag * (x0 * std::sin(theta) + x1 * std::cos(theta));
    }
    return r;
  }
  // Pair i's angle at position p and the magnitude of its cos/sin, from the definitions: theta =
  // p * base^(-2i/d) / factor, scaled by freq_scale; YaRN (arXiv 2309.00071, as ggml applies it)
  // blends the scaled and unscaled angles by a ramp over the pairs whose wavelengths lie between
  // beta_slow and beta_fast turns in the original context, and scales by 1 + 0.1 ln(scale).
  std::pair<double, double> rope_angle(int32_t i, int32_t p, float base, double factor, int32_t n_rot) const {
    const ModelConfig& c = m_->config;
    const double d = n_rot, fs = c.rope_freq_scale;
    const double extrap = p * std::pow(static_cast<double>(base), -2.0 * i / d) / factor;
    if (!c.yarn.on()) return {fs * extrap, c.yarn.attn_factor};
    auto corr = [&](double rotations) {
      return d * std::log(c.yarn.orig_ctx / (rotations * 2 * M_PI)) / (2 * std::log(static_cast<double>(base)));
    };
    const double low = std::max(0.0, std::floor(corr(c.yarn.beta_fast)));
    const double high = std::min(d - 1, std::ceil(corr(c.yarn.beta_slow)));
    const double ramp = (1 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0)) * c.yarn.ext_factor;
    return {fs * extrap * (1 - ramp) + extrap * ramp, c.yarn.attn_factor * (1 + 0.1 * std::log(1 / fs))};
  }
  std::vector<float> row(const TensorView& t, int64_t r) const {
    std::vector<float> out(static_cast<size_t>(t.ne(0)));
    dequantize_row(t.type(), t.row(r), out.data(), t.ne(0));
    return out;
  }
  std::vector<float> matvec(const TensorView& w, const std::vector<float>& x) const {
    std::vector<float> y(static_cast<size_t>(w.ne(1)));
    std::vector<float> r(static_cast<size_t>(w.ne(0)));
    for (int64_t o = 0; o < w.ne(1); ++o) {
      dequantize_row(w.type(), w.row(o), r.data(), w.ne(0));
      double acc = 0;
      for (int64_t i = 0; i < w.ne(0); ++i)
        acc += static_cast<double>(r[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
      y[static_cast<size_t>(o)] = static_cast<float>(acc);
    }
    return y;
  }
  std::vector<float> norm(const std::vector<float>& x, const std::vector<float>& w) const {
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + m_->config.rms_eps);
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i] * s * (w.empty() ? 1.0f : w[i]));
    return y;
  }
  // q/k norm, then (rope) RoPE to pos with layer il's rotated dims and factors.
  void head_prep(int32_t il, float* h, const std::vector<float>& qk_norm, int32_t pos, float base, bool rope) const {
    const ModelConfig& c = m_->config;
    const int32_t D = c.layer_head_dim(il);
    if (!qk_norm.empty()) {
      std::vector<float> v(h, h + D);
      v = norm(v, qk_norm);
      std::copy(v.begin(), v.end(), h);
    }
    if (!rope) return;
    const int32_t half = c.layer_rope_dim(il) / 2;
    const float* factors = c.layer_rope_factors(il);
    for (int32_t i = 0; i < half; ++i) {
      const auto [theta, mag] = rope_angle(i, pos, base, factors ? factors[i] : 1.0, 2 * half);
      const int32_t a = c.traits.rope == RopeStyle::Normal ? 2 * i : i;
      const int32_t b = c.traits.rope == RopeStyle::Normal ? 2 * i + 1 : i + half;
      const double x0 = h[a], x1 = h[b];
      h[a] = static_cast<float>(mag * (x0 * std::cos(theta) - x1 * std::sin(theta)));
      h[b] = static_cast<float>(mag * (x0 * std::sin(theta) + x1 * std::cos(theta)));
    }
  }

  std::shared_ptr<const Model> m_;
  int32_t window_, sinks_;
  RopeAt rope_at_;
  bool sliding_sinks_;
  int32_t n_past_ = 0;
  std::vector<std::vector<float>> k_, v_;  // [layer][pos][n_head_kv][head_dim] (CachePosition: before RoPE)
  std::vector<std::vector<std::vector<float>>> conv_hist_;  // lfm2: [layer][past token][n_embd] B*x inputs
  std::unique_ptr<ReferenceDeltaNet> delta_net_;            // qwen35's recurrent layers
  std::unique_ptr<ReferenceMamba2> mamba2_;                 // granitehybrid's
};

}  // namespace kvscope::test
