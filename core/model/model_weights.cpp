#include "model/model_weights.h"

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

  const GgufTensorInfo* find(const std::string& name, bool required) const {
    const GgufTensorInfo* t = f.find_tensor(name);
    if (!t && required) throw ModelError("missing tensor '" + name + "'");
    return t;
  }
  static void check_shape(const GgufTensorInfo& t, std::vector<int64_t> want) {
    std::vector<int64_t> got = t.ne;
    while (got.size() > want.size() && got.back() == 1) got.pop_back();
    if (got != want)
      throw ModelError("tensor '" + t.name + "' has shape " + shape_str(t.ne) + ", expected " + shape_str(want));
  }
  TensorView matrix(const std::string& name, int64_t in, int64_t out) const {
    const GgufTensorInfo* t = find(name, true);
    check_shape(*t, {in, out});
    try {
      return f.view(*t);
    } catch (const GgufError& e) { throw ModelError(e.what()); }
  }
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
};

}  // namespace

ModelWeights ModelWeights::from_gguf(const GgufFile& f, const ModelConfig& c) {
  Loader ld{f};
  ModelWeights w;
  w.token_embd = ld.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  w.output_norm = ld.vec("output_norm.weight", c.n_embd, true);
  if (ld.find("output.weight", false)) {
    w.output = ld.matrix("output.weight", c.n_embd, c.n_vocab);
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  const ArchTraits& tr = c.traits;
  w.layers.resize(static_cast<size_t>(c.n_layer));
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& L = w.layers[static_cast<size_t>(il)];
    L.attn_norm = ld.vec(p + "attn_norm.weight", c.n_embd, true);
    L.wq = ld.matrix(p + "attn_q.weight", c.n_embd, c.q_dim());
    L.wk = ld.matrix(p + "attn_k.weight", c.n_embd, c.kv_dim());
    L.wv = ld.matrix(p + "attn_v.weight", c.n_embd, c.kv_dim());
    L.wo = ld.matrix(p + "attn_output.weight", c.q_dim(), c.n_embd);
    L.bq = ld.vec(p + "attn_q.bias", c.q_dim(), tr.qkv_bias);
    L.bk = ld.vec(p + "attn_k.bias", c.kv_dim(), tr.qkv_bias);
    L.bv = ld.vec(p + "attn_v.bias", c.kv_dim(), tr.qkv_bias);
    if (tr.qk_norm) {
      L.q_norm = ld.vec(p + "attn_q_norm.weight", c.head_dim, true);
      L.k_norm = ld.vec(p + "attn_k_norm.weight", c.head_dim, true);
    }
    if (tr.post_norms) {
      L.post_attn_norm = ld.vec(p + "post_attention_norm.weight", c.n_embd, true);
      L.post_ffw_norm = ld.vec(p + "post_ffw_norm.weight", c.n_embd, true);
    }
    L.ffn_norm = ld.vec(p + "ffn_norm.weight", c.n_embd, true);
    L.w_gate = ld.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff);
    L.w_up = ld.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff);
    L.w_down = ld.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
  }
  for (const auto& t : f.tensors()) {
    w.total_bytes += t.nbytes;
    w.n_params += static_cast<uint64_t>(t.n_elements());
  }
  return w;
}

}  // namespace kvscope
