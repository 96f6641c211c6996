#include "model/model_weights.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvscope {

namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

struct Loader {
  const GgufFile& f;
  ModelWeights& w;

  const GgufTensorInfo* find(const std::string& name, bool required) const {
    const GgufTensorInfo* t = f.find_tensor(name);
    if (!t && required) throw ModelError("missing tensor '" + name + "'");
    return t;
  }
  static void check_shape(const GgufTensorInfo& t, std::vector<int64_t> want) {
    std::vector<int64_t> got = t.ne;
    while (got.size() > want.size() && got.back() == 1) got.pop_back();
    while (want.size() > got.size() && want.back() == 1) want.pop_back();  // [.., .., 1 head] is 2-D on file
    if (got != want)
      throw ModelError("tensor '" + t.name + "' has shape " + shape_str(t.ne) + ", expected " + shape_str(want));
  }
  TensorView tensor(const std::string& name, std::vector<int64_t> shape) const {
    const GgufTensorInfo* t = find(name, true);
    check_shape(*t, std::move(shape));
    try {
      return f.view(*t);
    } catch (const GgufError& e) { throw ModelError(e.what()); }
  }
  TensorView matrix(const std::string& name, int64_t in, int64_t out) const { return tensor(name, {in, out}); }
  std::vector<float> vec(const std::string& name, int64_t n, bool required) const {
    const GgufTensorInfo* t = find(name, required);
    if (!t) return {};
    check_shape(*t, {n});
    TensorView v;
    try {
      v = f.view(*t);
    } catch (const GgufError& e) { throw ModelError(e.what()); }
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(v.type(), v.data, out.data(), n);
    for (float x : out)
      if (!std::isfinite(x)) throw ModelError("tensor '" + name + "' contains NaN or Inf values");
    return out;
  }
  // A required small tensor of any shape as f32 values, in memory order.
  std::vector<float> flat(const std::string& name, std::vector<int64_t> shape) const {
    const TensorView v = tensor(name, shape);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(v.type(), v.data, out.data(), n);
    for (float x : out)
      if (!std::isfinite(x)) throw ModelError("tensor '" + name + "' contains NaN or Inf values");
    return out;
  }
  // `<weight>.scale`, a one-value multiplier of the matrix's output; 1 when absent.
  float scale(const std::string& weight) const {
    const std::vector<float> s = vec(weight + ".scale", 1, false);
    return s.empty() ? 1.0f : s[0];
  }
  // Rows [row0, row0 + n) of t as a matrix of its own (fused q/k/v, [gate; up], one expert).
  TensorView rows(const TensorView& t, int64_t row0, int64_t n) const {
    auto info = std::make_shared<GgufTensorInfo>(*t.info);
    info->ne = {t.ne(0), n};
    info->nbytes = static_cast<uint64_t>(n) * t.row_bytes();
    w.slices.push_back(info);
    return TensorView{info.get(), t.row(row0)};
  }
};

// Q, K and V: three matrices, or one fused attn_qkv (phi3's files) split by rows.
void load_qkv(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L, int32_t il) {
  const int64_t E = c.n_embd, Q = c.layer_q_dim(il), KV = c.layer_kv_dim(il);
  if (c.traits.per_layer_shapes) {  // gemma4: no K/V in a layer that borrows, V optional
    L.wq = ld.matrix(p + "attn_q.weight", E, Q);
    if (!c.layer_owns_kv(il)) return;
    L.wk = ld.matrix(p + "attn_k.weight", E, KV);
    L.v_from_k = !ld.find(p + "attn_v.weight", false);
    L.wv = L.v_from_k ? L.wk : ld.matrix(p + "attn_v.weight", E, KV);
    return;
  }
  if (ld.find(p + "attn_qkv.weight", false)) {
    const TensorView qkv = ld.matrix(p + "attn_qkv.weight", E, Q + 2 * KV);
    L.wq = ld.rows(qkv, 0, Q);
    L.wk = ld.rows(qkv, Q, KV);
    L.wv = ld.rows(qkv, Q + KV, KV);
    const std::vector<float> b = ld.vec(p + "attn_qkv.bias", Q + 2 * KV, false);
    if (!b.empty()) {
      L.aq.bias.assign(b.begin(), b.begin() + Q);
      L.ak.bias.assign(b.begin() + Q, b.begin() + Q + KV);
      L.av.bias.assign(b.begin() + Q + KV, b.end());
    }
    L.aq.scale = L.ak.scale = L.av.scale = ld.scale(p + "attn_qkv");
    return;
  }
  const int64_t QR = c.layer_q_rows(il);  // with attn_output_gate, each head's gate follows it
  L.wq = ld.matrix(p + "attn_q.weight", E, QR);
  L.wk = ld.matrix(p + "attn_k.weight", E, KV);
  L.wv = ld.matrix(p + "attn_v.weight", E, KV);
  L.aq = {ld.vec(p + "attn_q.bias", QR, c.traits.qkv_bias), ld.scale(p + "attn_q")};
  L.ak = {ld.vec(p + "attn_k.bias", KV, c.traits.qkv_bias), ld.scale(p + "attn_k")};
  L.av = {ld.vec(p + "attn_v.bias", KV, c.traits.qkv_bias), ld.scale(p + "attn_v")};
}

// Latent attention (MlaConfig): the low-rank query, the latent + RoPE key projection, and each
// head's k_b / v_b slice of the 3-D [.. x .. x n_head] tensors.
void load_latent_attention(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  const MlaConfig& m = c.mla;
  MlaWeights& W = L.mla;
  const int64_t E = c.n_embd, qk = m.qk_nope + c.rope_dim, R = m.kv_lora_rank;
  if (ld.find(p + "attn_q_a.weight", false)) {
    if (m.q_lora_rank <= 0)
      throw ModelError("attention.q_lora_rank is 0 or missing, but the file has " + p + "attn_q_a.weight");
    W.wq_a = ld.matrix(p + "attn_q_a.weight", E, m.q_lora_rank);
    W.q_a_norm = ld.vec(p + "attn_q_a_norm.weight", m.q_lora_rank, true);
    W.wq_b = ld.matrix(p + "attn_q_b.weight", m.q_lora_rank, c.n_head * qk);
  } else {
    L.wq = ld.matrix(p + "attn_q.weight", E, c.n_head * qk);
  }
  W.wkv_a = ld.matrix(p + "attn_kv_a_mqa.weight", E, R + c.rope_dim);
  W.kv_a_norm = ld.vec(p + "attn_kv_a_norm.weight", R, true);
  const TensorView k_b = ld.tensor(p + "attn_k_b.weight", {m.qk_nope, R, c.n_head});
  const TensorView v_b = ld.tensor(p + "attn_v_b.weight", {R, m.v_dim, c.n_head});
  for (int32_t h = 0; h < c.n_head; ++h) {
    W.k_b.push_back(ld.rows(k_b, static_cast<int64_t>(h) * R, R));
    W.v_b.push_back(ld.rows(v_b, static_cast<int64_t>(h) * m.v_dim, m.v_dim));
  }
}

void load_attention(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L, int32_t il) {
  const ArchTraits& tr = c.traits;
  L.attn_norm = ld.vec(p + "attn_norm.weight", c.n_embd, true);
  if (tr.latent_attention) {
    load_latent_attention(ld, c, p, L);
    L.wo = ld.matrix(p + "attn_output.weight", static_cast<int64_t>(c.n_head) * c.mla.v_dim, c.n_embd);
  } else {
    load_qkv(ld, c, p, L, il);
    L.wo = ld.matrix(p + "attn_output.weight", c.layer_q_dim(il), c.n_embd);
  }
  L.ao = {tr.out_bias ? ld.vec(p + "attn_output.bias", c.n_embd, false) : std::vector<float>{},
          ld.scale(p + "attn_output")};
  if (tr.qk_norm || (tr.qk_norm_if_present && ld.find(p + "attn_q_norm.weight", false))) {
    L.q_norm = ld.vec(p + "attn_q_norm.weight", c.layer_head_dim(il), true);
    if (c.layer_owns_kv(il)) L.k_norm = ld.vec(p + "attn_k_norm.weight", c.layer_head_dim(il), true);
  }
  if (tr.attn_sinks) L.attn_sinks = ld.vec(p + "attn_sinks.weight", c.n_head, true);
  if (tr.post_norms) {
    L.post_attn_norm = ld.vec(p + "post_attention_norm.weight", c.n_embd, true);
    L.post_ffw_norm = ld.vec(p + "post_ffw_norm.weight", c.n_embd, true);
  }
  L.ffn_norm =
      ld.vec(p + (tr.ffn_norm_post_attention ? "post_attention_norm.weight" : "ffn_norm.weight"), c.n_embd, true);
}

void load_dense_ffn(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L, int32_t il) {
  const int64_t E = c.n_embd, F = c.layer_n_ff(il);
  if (c.traits.fused_gate_up) {
    const TensorView gate_up = ld.matrix(p + "ffn_up.weight", E, 2 * F);
    L.w_gate = ld.rows(gate_up, 0, F);
    L.w_up = ld.rows(gate_up, F, F);
  } else {
    L.w_gate = ld.matrix(p + "ffn_gate.weight", E, F);
    L.w_up = ld.matrix(p + "ffn_up.weight", E, F);
  }
  L.w_down = ld.matrix(p + "ffn_down.weight", F, E);
  if (c.traits.ffn_bias) {
    L.a_gate.bias = ld.vec(p + "ffn_gate.bias", F, false);
    L.a_up.bias = ld.vec(p + "ffn_up.bias", F, false);
    L.a_down.bias = ld.vec(p + "ffn_down.bias", E, false);
  }
  if (c.traits.ffn_scales) {
    L.a_gate.scale = ld.scale(p + "ffn_gate");
    L.a_up.scale = ld.scale(p + "ffn_up");
    L.a_down.scale = ld.scale(p + "ffn_down");
  }
}

// One 3-D expert tensor [in x out x n_expert] as n_expert matrices.
std::vector<TensorView> expert_views(const Loader& ld, const std::string& name, int64_t in, int64_t out,
                                     int32_t n_expert) {
  const TensorView all = ld.tensor(name, {in, out, n_expert});
  std::vector<TensorView> v;
  for (int32_t e = 0; e < n_expert; ++e) v.push_back(ld.rows(all, e * out, out));
  return v;
}

void load_moe_ffn(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  const MoeConfig& m = c.moe;
  const int64_t E = c.n_embd, F = m.n_ff_exp;
  MoeWeights& X = L.experts;
  L.moe = true;
  X.router = ld.matrix(p + "ffn_gate_inp.weight", E, m.n_expert);
  if (ld.find(p + "ffn_gate_up_exps.weight", false)) {  // [gate; up] per expert in one tensor
    const std::vector<TensorView> gate_up = expert_views(ld, p + "ffn_gate_up_exps.weight", E, 2 * F, m.n_expert);
    for (const TensorView& gu : gate_up) {
      X.gate.push_back(ld.rows(gu, 0, F));
      X.up.push_back(ld.rows(gu, F, F));
    }
  } else {
    X.gate = expert_views(ld, p + "ffn_gate_exps.weight", E, F, m.n_expert);
    X.up = expert_views(ld, p + "ffn_up_exps.weight", E, F, m.n_expert);
  }
  X.down = expert_views(ld, p + "ffn_down_exps.weight", F, E, m.n_expert);
  if (m.selection_bias) X.selection_bias = ld.vec(p + "exp_probs_b.bias", m.n_expert, true);
  if (c.traits.expert_scales) {
    X.gate_scale = ld.vec(p + "ffn_gate_exps.scale", m.n_expert, false);
    X.up_scale = ld.vec(p + "ffn_up_exps.scale", m.n_expert, false);
    X.down_scale = ld.vec(p + "ffn_down_exps.scale", m.n_expert, false);
  }
  if (c.traits.moe_biases) {
    X.router_bias = ld.vec(p + "ffn_gate_inp.bias", m.n_expert, true);
    X.gate_bias = ld.flat(p + "ffn_gate_exps.bias", {F, m.n_expert});
    X.up_bias = ld.flat(p + "ffn_up_exps.bias", {F, m.n_expert});
    X.down_bias = ld.flat(p + "ffn_down_exps.bias", {E, m.n_expert});
  }
  // n_shared experts of n_ff_exp, or qwen35moe's one of n_ff_shared (when the file has it).
  const bool gated_shared = m.n_ff_shared > 0;
  const int64_t S = gated_shared ? m.n_ff_shared : F * m.n_shared;
  if (S == 0 || (gated_shared && !ld.find(p + "ffn_up_shexp.weight", false))) return;
  X.shared_gate = ld.matrix(p + "ffn_gate_shexp.weight", E, S);
  X.shared_up = ld.matrix(p + "ffn_up_shexp.weight", E, S);
  X.shared_down = ld.matrix(p + "ffn_down_shexp.weight", S, E);
  if (gated_shared) {  // qwen35moe: scaled, and gated by sigmoid(ffn_gate_inp_shexp . x)
    X.shared_gate_scale = ld.scale(p + "ffn_gate_shexp");
    X.shared_up_scale = ld.scale(p + "ffn_up_shexp");
    X.shared_down_scale = ld.scale(p + "ffn_down_shexp");
    X.shared_router = ld.vec(p + "ffn_gate_inp_shexp.weight", E, true);
  }
}

// gemma4: the per-layer embedding's tensors and the layer output scale. Its MoE layers (a
// shared MLP beside routed GELU experts, each with its own norms) are not run yet.
void load_gemma4_extras(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  if (ld.find(p + "ffn_gate_inp.weight", false))
    throw ModelError("gemma4's mixture-of-experts layers (" + p +
                     "ffn_gate_inp.weight) are not supported yet: only the dense Gemma 4 models run");
  const int64_t E = c.n_embd, P = c.n_embd_per_layer;
  if (P > 0) {
    L.ple_gate = ld.matrix(p + "inp_gate.weight", E, P);
    L.ple_proj = ld.matrix(p + "proj.weight", P, E);
    L.ple_post_norm = ld.vec(p + "post_norm.weight", E, true);
  }
  const std::vector<float> s = ld.vec(p + "layer_output_scale.weight", 1, false);
  if (!s.empty()) L.out_scale = s[0];
}

// lfm2: a short-convolution layer's tensors in place of attention (its norm is attn_norm).
void load_short_conv(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  const int64_t E = c.n_embd;
  L.attn_norm = ld.vec(p + "attn_norm.weight", E, true);
  L.conv_in = ld.matrix(p + "shortconv.in_proj.weight", E, 3 * E);
  L.conv_kernel = ld.flat(p + "shortconv.conv.weight", {c.conv_l_cache, E});
  L.conv_out = ld.matrix(p + "shortconv.out_proj.weight", E, E);
  L.ffn_norm = ld.vec(p + "ffn_norm.weight", E, true);
}

// qwen35: a Gated DeltaNet layer's tensors in place of attention (GdnWeights).
void load_gated_delta_net(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  const GdnConfig& g = c.gdn;
  const int64_t E = c.n_embd, H = g.n_v_heads;
  GdnWeights& G = L.gdn;
  L.attn_norm = ld.vec(p + "attn_norm.weight", E, true);
  G.in_proj = ld.matrix(p + "attn_qkv.weight", E, g.conv_channels());
  G.z_proj = ld.matrix(p + "attn_gate.weight", E, g.value_dim());
  G.alpha_proj = ld.matrix(p + "ssm_alpha.weight", E, H);
  G.beta_proj = ld.matrix(p + "ssm_beta.weight", E, H);
  G.out_proj = ld.matrix(p + "ssm_out.weight", g.value_dim(), E);
  G.in_scale = ld.scale(p + "attn_qkv");
  G.z_scale = ld.scale(p + "attn_gate");
  G.alpha_scale = ld.scale(p + "ssm_alpha");
  G.beta_scale = ld.scale(p + "ssm_beta");
  G.out_scale = ld.scale(p + "ssm_out");
  G.conv_kernel = ld.flat(p + "ssm_conv1d.weight", {g.conv_kernel, g.conv_channels()});
  G.dt_bias = ld.vec(p + "ssm_dt.bias", H, true);
  G.a = ld.vec(p + "ssm_a", H, true);
  G.norm = ld.vec(p + "ssm_norm.weight", g.d_state, true);
  L.ffn_norm = ld.vec(p + "post_attention_norm.weight", E, true);
}

// granitehybrid: a Mamba-2 layer's tensors in place of attention (Mamba2Weights).
void load_mamba2(const Loader& ld, const ModelConfig& c, const std::string& p, LayerWeights& L) {
  const Mamba2Config& m = c.mamba2;
  const int64_t E = c.n_embd, H = m.n_heads;
  Mamba2Weights& M = L.mamba2;
  L.attn_norm = ld.vec(p + "attn_norm.weight", E, true);
  M.in_proj = ld.matrix(p + "ssm_in.weight", E, m.in_proj_rows());
  M.in_scale = ld.scale(p + "ssm_in");
  M.conv_kernel = ld.flat(p + "ssm_conv1d.weight", {m.conv_kernel, m.conv_channels()});
  M.conv_bias = ld.vec(p + "ssm_conv1d.bias", m.conv_channels(), false);
  M.dt_bias = ld.vec(p + "ssm_dt.bias", H, true);
  M.a = ld.flat(p + "ssm_a", {1, H});
  M.d = ld.flat(p + "ssm_d", {1, H});
  M.norm = ld.flat(p + "ssm_norm.weight", {m.d_inner / m.n_groups, m.n_groups});
  M.out_proj = ld.matrix(p + "ssm_out.weight", m.d_inner, E);
  M.out_scale = ld.scale(p + "ssm_out");
  L.ffn_norm = ld.vec(p + "ffn_norm.weight", E, true);
}

void load_per_layer_embeddings(const Loader& ld, const ModelConfig& c, ModelWeights& w) {
  const int64_t E = c.n_embd, P = c.n_embd_per_layer, LP = P * c.n_layer;
  if (P == 0) return;
  w.ple_token_embd = ld.matrix("per_layer_token_embd.weight", LP, c.n_vocab);
  w.ple_model_proj = ld.matrix("per_layer_model_proj.weight", E, LP);
  w.ple_proj_norm = ld.vec("per_layer_proj_norm.weight", P, true);
}

}  // namespace

ModelWeights ModelWeights::from_gguf(const GgufFile& f, const ModelConfig& c) {
  ModelWeights w;
  Loader ld{f, w};
  w.token_embd = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  // lfm2's final norm is stored as token_embd_norm (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2).
  w.output_norm = ld.vec(c.traits.short_conv ? "token_embd_norm.weight" : "output_norm.weight", c.n_embd, true);
  if (ld.find("output.weight", false)) {
    w.output = ld.matrix("output.weight", c.n_embd, c.n_vocab);
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  w.layers.resize(static_cast<size_t>(c.n_layer));
  uint64_t idle_expert_params = 0;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    if (c.layer_is_recurrent(il) && c.traits.gated_delta_net)
      load_gated_delta_net(ld, c, p, L);
    else if (c.layer_is_recurrent(il) && c.traits.mamba2)
      load_mamba2(ld, c, p, L);
    else if (c.layer_is_recurrent(il))
      load_short_conv(ld, c, p, L);
    else
      load_attention(ld, c, p, L, il);
    if (c.traits.per_layer_shapes) load_gemma4_extras(ld, c, p, L);
    if (c.layer_is_moe(il)) {
      load_moe_ffn(ld, c, p, L);
      idle_expert_params += static_cast<uint64_t>(c.moe.n_expert - c.moe.n_expert_used) * 3 * c.n_embd * c.moe.n_ff_exp;
    } else {
      load_dense_ffn(ld, c, p, L, il);
    }
  }
  load_per_layer_embeddings(ld, c, w);
  for (const auto& t : f.tensors()) {
    w.total_bytes += t.nbytes;
    w.n_params += static_cast<uint64_t>(t.n_elements());
  }
  w.n_active_params = w.n_params - std::min(w.n_params, idle_expert_params);
  return w;
}

}  // namespace kvscope
