#include "model/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>

#include "gguf/gguf_writer.h"
#include "model/model_config.h"

namespace kvscope {

namespace {

// A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte-fallback tokens, then
// letter pieces so that plain text tokenizes into something other than bytes.
void add_tokenizer(GgufWriter& w, int32_t n_vocab, const std::vector<std::string>& specials,
                   const std::vector<std::string>& users) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.emplace_back(buf);
    types.push_back(6);
  }
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (size_t i = 0; static_cast<int32_t>(tokens.size()) < n_vocab; ++i) {
    std::string piece;
    const size_t k = i % (2 * letters.size());
    if (k < letters.size())
      piece = "\xE2\x96\x81" + std::string(1, letters[k]);  // "▁x"
    else
      piece = std::string(1, letters[k - letters.size()]);
    if (i >= 2 * letters.size()) piece += std::to_string(i / (2 * letters.size()));
    tokens.push_back(piece);
    types.push_back(1);
  }
  // Control tokens of a chat vocabulary take the last ids, user-defined ones the ids before.
  for (size_t i = 0; i < users.size(); ++i) {
    const size_t id = tokens.size() - specials.size() - users.size() + i;
    tokens[id] = users[i];
    types[id] = 4;
  }
  for (size_t i = 0; i < specials.size(); ++i) {
    const size_t id = tokens.size() - specials.size() + i;
    tokens[id] = specials[i];
    types[id] = 3;
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
}

int32_t ff_exp(const SyntheticSpec& s) {
  if (s.arch == "mistral3") return s.n_ff;  // llama.cpp's mistral3 makes its experts n_ff wide
  return s.n_ff_exp > 0 ? s.n_ff_exp : s.n_ff / std::max(1, s.n_expert_used);
}

bool is_moe_arch(const std::string& a) {
  return a == "qwen3moe" || a == "glm4moe" || a == "gpt-oss" || a == "deepseek2" || a == "qwen35moe";
}
bool has_dense_lead(const std::string& a) { return a == "glm4moe" || a == "deepseek2"; }

bool gemma4_swa(const SyntheticSpec& s, int32_t il) { return il % s.swa_pattern < s.swa_pattern - 1; }
int32_t gemma4_first_shared(const SyntheticSpec& s) { return s.n_layer - s.n_kv_shared; }
int32_t gemma4_n_ff(const SyntheticSpec& s, int32_t il) { return il >= gemma4_first_shared(s) ? 2 * s.n_ff : s.n_ff; }

// gemma4's layer (src/models/gemma4.cpp's load_arch_tensors): its own head shape, no K/V in
// the layers that borrow KV, the per-layer embedding's gate, projection and norm, a layer scale.
void write_gemma4_layer(const SyntheticSpec& s, int32_t il, int32_t hd_full,
                        const std::function<void(const std::string&, int64_t, int64_t, float)>& matrix,
                        const std::function<void(const std::string&, int64_t, float, float)>& vec) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const bool swa = gemma4_swa(s, il), owns = il < gemma4_first_shared(s);
  const int64_t E = s.n_embd, hd = swa ? s.head_dim_swa : hd_full, Q = s.n_head * hd,
                KV = (swa ? s.n_head_kv_swa : s.n_head_kv) * hd, F = gemma4_n_ff(s, il), P = s.n_embd_per_layer;
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
  vec(p + "attn_norm.weight", E, 1.0f, 0.05f);
  matrix(p + "attn_q.weight", E, Q, in_scale);
  if (owns) {
    matrix(p + "attn_k.weight", E, KV, in_scale);
    if (swa || !s.k_eq_v) matrix(p + "attn_v.weight", E, KV, in_scale);
  }
  matrix(p + "attn_output.weight", Q, E, 1.0f / std::sqrt(static_cast<float>(Q)));
  vec(p + "attn_q_norm.weight", hd, 1.0f, 0.05f);
  if (owns) vec(p + "attn_k_norm.weight", hd, 1.0f, 0.05f);
  vec(p + "post_attention_norm.weight", E, 1.0f, 0.05f);
  vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
  matrix(p + "ffn_gate.weight", E, F, in_scale);
  matrix(p + "ffn_up.weight", E, F, in_scale);
  matrix(p + "ffn_down.weight", F, E, 1.0f / std::sqrt(static_cast<float>(F)));
  vec(p + "post_ffw_norm.weight", E, 1.0f, 0.05f);
  if (P > 0) {
    matrix(p + "inp_gate.weight", E, P, in_scale);
    matrix(p + "proj.weight", P, E, 1.0f / std::sqrt(static_cast<float>(P)));
    vec(p + "post_norm.weight", E, 1.0f, 0.05f);
  }
  vec(p + "layer_output_scale.weight", 1, 0.9f, 0.05f);
}

// lfm2: layer il is attention when il % swa_pattern == swa_pattern - 1, else a short
// convolution (3 taps), as LFM2 mixes them; KV head counts per layer, 0 in the convolutions.
bool lfm2_conv(const SyntheticSpec& s, int32_t il) { return il % s.swa_pattern != s.swa_pattern - 1; }

void write_lfm2_metadata(GgufWriter& w, const SyntheticSpec& s) {
  std::vector<int32_t> kv_heads;  // head_count stays one number, as LFM2's converter writes it
  for (int32_t il = 0; il < s.n_layer; ++il) kv_heads.push_back(lfm2_conv(s, il) ? 0 : s.n_head_kv);
  w.set_i32_array("lfm2.attention.head_count_kv", kv_heads);
  w.set_u32("lfm2.shortconv.l_cache", 3);
}

// lfm2's short-convolution layer: its norm, in_proj to B, C and x, the 3-tap kernel (f32 in
// every file: ggml's ssm_conv reads f32 only), out_proj.
void write_lfm2_conv(const std::string& p, int64_t E,
                     const std::function<void(const std::string&, int64_t, int64_t, float)>& matrix,
                     const std::function<void(const std::string&, int64_t, float, float)>& vec,
                     const std::function<void(const std::string&, int64_t, int64_t)>& f32_matrix) {
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
  vec(p + "attn_norm.weight", E, 1.0f, 0.05f);
  matrix(p + "shortconv.in_proj.weight", E, 3 * E, in_scale);
  f32_matrix(p + "shortconv.conv.weight", 3, E);
  matrix(p + "shortconv.out_proj.weight", E, E, in_scale);
}

// qwen35: layer il is gated attention when (il + 1) % full_attention_interval == 0, else Gated
// DeltaNet; llama.cpp reads the interval when attention.recurrent_layers is absent.
bool qwen35_recurrent(const SyntheticSpec& s, int32_t il) { return (il + 1) % s.full_attention_interval != 0; }

// qwen35's ssm.* keys and its interleaved M-RoPE sections, sized so every rotated pair takes
// the text position (as Qwen3.5's [11, 11, 10, 0] over 32 pairs).
void write_qwen35_metadata(GgufWriter& w, const SyntheticSpec& s, int32_t hd) {
  const std::string a = s.arch + ".";
  w.set_u32(a + "full_attention_interval", static_cast<uint32_t>(s.full_attention_interval));
  w.set_u32(a + "ssm.conv_kernel", 4);
  w.set_u32(a + "ssm.state_size", static_cast<uint32_t>(s.ssm_state));
  w.set_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.ssm_v_heads));
  w.set_u32(a + "ssm.group_count", static_cast<uint32_t>(s.ssm_k_heads));
  w.set_u32(a + "ssm.inner_size", static_cast<uint32_t>(s.ssm_v_heads * s.ssm_state));
  const int32_t third = (s.rope_dim > 0 ? s.rope_dim : hd) / 2 / 3 + 1;
  w.set_i32_array(a + "rope.dimension_sections", {third, third, third, 0});
}

// qwen35's Gated DeltaNet layer (llama_model_qwen35::load_arch_tensors): in_proj to [q; k; v],
// the output gate, alpha and beta, the f32 conv kernel, dt bias, a = -exp(A_log) < 0, the
// per-head norm, out_proj.
void write_gated_delta_net(const SyntheticSpec& s, const std::string& p,
                           const std::function<void(const std::string&, int64_t, int64_t, float)>& matrix,
                           const std::function<void(const std::string&, int64_t, float, float)>& vec,
                           const std::function<void(const std::string&, int64_t, int64_t)>& f32_matrix) {
  const int64_t E = s.n_embd, V = static_cast<int64_t>(s.ssm_v_heads) * s.ssm_state;
  const int64_t C = 2 * static_cast<int64_t>(s.ssm_k_heads) * s.ssm_state + V;
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
  vec(p + "attn_norm.weight", E, 1.0f, 0.05f);
  matrix(p + "attn_qkv.weight", E, C, in_scale);
  matrix(p + "attn_gate.weight", E, V, in_scale);
  matrix(p + "ssm_alpha.weight", E, s.ssm_v_heads, in_scale);
  matrix(p + "ssm_beta.weight", E, s.ssm_v_heads, in_scale);
  f32_matrix(p + "ssm_conv1d.weight", 4, C);
  vec(p + "ssm_dt.bias", s.ssm_v_heads, 0.0f, 0.5f);
  vec(p + "ssm_a", s.ssm_v_heads, -0.6f, 0.15f);
  vec(p + "ssm_norm.weight", s.ssm_state, 1.0f, 0.05f);
  matrix(p + "ssm_out.weight", V, E, 1.0f / std::sqrt(static_cast<float>(V)));
}

// granitehybrid: layer il is attention when il % swa_pattern == swa_pattern - 1, else Mamba-2
// (Granite 4.0-H has 4 attention layers in 40); KV head counts per layer, 0 in the Mamba-2 ones;
// ssm.inner_size 2 x n_embd (the only expansion llama.cpp runs); Granite's multipliers.
bool granite_mamba(const SyntheticSpec& s, int32_t il) { return il % s.swa_pattern != s.swa_pattern - 1; }

void write_granite_metadata(GgufWriter& w, const SyntheticSpec& s) {
  const std::string a = s.arch + ".";
  // head_count stays one number, as Granite's converter writes it (llama.cpp takes the head size
  // from layer 0's head count, and Granite 4.0-H starts with Mamba-2 layers).
  std::vector<int32_t> kv_heads;
  for (int32_t il = 0; il < s.n_layer; ++il) kv_heads.push_back(granite_mamba(s, il) ? 0 : s.n_head_kv);
  w.set_i32_array(a + "attention.head_count_kv", kv_heads);
  w.set_u32(a + "ssm.conv_kernel", 4);
  w.set_u32(a + "ssm.inner_size", static_cast<uint32_t>(2 * s.n_embd));
  w.set_u32(a + "ssm.state_size", static_cast<uint32_t>(s.ssm_state));
  w.set_u32(a + "ssm.time_step_rank", static_cast<uint32_t>(s.ssm_v_heads));
  w.set_u32(a + "ssm.group_count", static_cast<uint32_t>(s.ssm_k_heads));
  w.set_f32(a + "embedding_scale", 2.0f);
  w.set_f32(a + "residual_scale", 0.5f);
  w.set_f32(a + "logit_scale", 2.0f);
}

// granitehybrid's Mamba-2 layer (llama_model_granite_hybrid::load_arch_tensors): in_proj to
// [z; x; B; C; dt], the f32 conv kernel and bias, dt bias, A < 0 and D per head ([1, heads]),
// the grouped norm [d_inner / groups, groups], out_proj.
void write_mamba2(const SyntheticSpec& s, const std::string& p,
                  const std::function<void(const std::string&, int64_t, int64_t, float)>& matrix,
                  const std::function<void(const std::string&, int64_t, float, float)>& vec,
                  const std::function<void(const std::string&, int64_t, int64_t)>& f32_matrix,
                  const std::function<void(const std::string&, std::vector<int64_t>, float, float)>& f32_shaped) {
  const int64_t E = s.n_embd, DI = 2 * E, H = s.ssm_v_heads, G = s.ssm_k_heads;
  const int64_t C = DI + 2 * G * s.ssm_state;
  vec(p + "attn_norm.weight", E, 1.0f, 0.05f);
  matrix(p + "ssm_in.weight", E, DI + C + H, 1.0f / std::sqrt(static_cast<float>(E)));
  f32_matrix(p + "ssm_conv1d.weight", 4, C);
  vec(p + "ssm_conv1d.bias", C, 0.0f, 0.05f);
  vec(p + "ssm_dt.bias", H, 0.0f, 0.5f);
  f32_shaped(p + "ssm_a", {1, H}, -1.0f, 0.3f);
  f32_shaped(p + "ssm_d", {1, H}, 1.0f, 0.2f);
  f32_shaped(p + "ssm_norm.weight", {DI / G, G}, 1.0f, 0.05f);
  matrix(p + "ssm_out.weight", DI, E, 1.0f / std::sqrt(static_cast<float>(DI)));
}

// gemma4's hyper-parameters: per-layer flags, head counts and FFN widths as arrays.
void write_gemma4_metadata(GgufWriter& w, const SyntheticSpec& s, int32_t hd) {
  const std::string a = s.arch + ".";
  std::vector<int32_t> swa, kv_heads, ffs;
  for (int32_t il = 0; il < s.n_layer; ++il) {
    swa.push_back(gemma4_swa(s, il) ? 1 : 0);
    kv_heads.push_back(gemma4_swa(s, il) ? s.n_head_kv_swa : s.n_head_kv);
    ffs.push_back(gemma4_n_ff(s, il));
  }
  w.set_i32_array(a + "attention.sliding_window_pattern", swa);
  w.set_i32_array(a + "attention.head_count_kv", kv_heads);
  w.set_i32_array(a + "feed_forward_length", ffs);
  w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  w.set_u32(a + "attention.key_length", static_cast<uint32_t>(hd));
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(hd));
  w.set_u32(a + "attention.key_length_swa", static_cast<uint32_t>(s.head_dim_swa));
  w.set_u32(a + "attention.value_length_swa", static_cast<uint32_t>(s.head_dim_swa));
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(hd));
  w.set_u32(a + "rope.dimension_count_swa", static_cast<uint32_t>(s.head_dim_swa));
  w.set_f32(a + "rope.freq_base_swa", s.rope_base_swa);
  w.set_u32(a + "attention.shared_kv_layers", static_cast<uint32_t>(s.n_kv_shared));
  w.set_u32(a + "embedding_length_per_layer_input", static_cast<uint32_t>(s.n_embd_per_layer));
  if (s.final_softcap > 0.0f) w.set_f32(a + "final_logit_softcapping", s.final_softcap);
}

// One layer's tensors, named and shaped as the architecture's llama.cpp loader expects them.
struct LayerWriter {
  using Matrix = std::function<void(const std::string&, int64_t, int64_t, float)>;
  using Vec = std::function<void(const std::string&, int64_t, float, float)>;
  using Tensor3 = std::function<void(const std::string&, int64_t, int64_t, int64_t, float)>;
  using Shaped = std::function<void(const std::string&, std::vector<int64_t>, float, float)>;
  const SyntheticSpec& s;
  int32_t hd;
  Matrix matrix;
  Vec vec;
  Tensor3 tensor3;
  Shaped f32_shaped;                                                // f32 of any shape: center + spread x normal
  std::function<void(const std::string&, int64_t, int64_t)> bias2;  // f32 [n, m]

  void write(int32_t il) const {
    const std::string& a = s.arch;
    const std::string p = "blk." + std::to_string(il) + ".";
    const int64_t E = s.n_embd, Q = static_cast<int64_t>(s.n_head) * hd, KV = static_cast<int64_t>(s.n_head_kv) * hd;
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
    if (a == "lfm2" && lfm2_conv(s, il)) {
      write_lfm2_conv(p, E, matrix, vec, bias2);
      vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
      return write_dense_ffn(p, s.n_ff, false);
    }
    if (a == "granitehybrid" && granite_mamba(s, il)) {
      write_mamba2(s, p, matrix, vec, bias2, f32_shaped);
      vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
      return write_dense_ffn(p, s.n_ff, false);
    }
    const bool qwen35 = a == "qwen35" || a == "qwen35moe";
    if (qwen35 && qwen35_recurrent(s, il)) {
      write_gated_delta_net(s, p, matrix, vec, bias2);
      vec(p + "post_attention_norm.weight", E, 1.0f, 0.05f);
      return a == "qwen35moe" ? write_experts(p) : write_dense_ffn(p, s.n_ff, false);
    }
    vec(p + "attn_norm.weight", E, 1.0f, 0.05f);
    if (qwen35) {  // each head's query, then its output gate
      matrix(p + "attn_q.weight", E, 2 * Q, in_scale);
      matrix(p + "attn_k.weight", E, KV, in_scale);
      matrix(p + "attn_v.weight", E, KV, in_scale);
    } else if (a == "deepseek2") {
      write_latent_attention(p);
    } else if (a == "phi3") {
      matrix(p + "attn_qkv.weight", E, Q + 2 * KV, in_scale);  // phi3's files fuse q, k and v
    } else {
      matrix(p + "attn_q.weight", E, Q, in_scale);
      matrix(p + "attn_k.weight", E, KV, in_scale);
      matrix(p + "attn_v.weight", E, KV, in_scale);
    }
    if (a != "deepseek2") matrix(p + "attn_output.weight", Q, E, 1.0f / std::sqrt(static_cast<float>(Q)));
    if (a == "gpt-oss") {
      vec(p + "attn_output.bias", E, 0.0f, 0.05f);
      vec(p + "attn_sinks.weight", s.n_head, 0.0f, 1.0f);
    }
    if (a == "qwen2" || a == "glm4" || a == "glm4moe" || a == "gpt-oss") {
      vec(p + "attn_q.bias", Q, 0.0f, 0.1f);
      vec(p + "attn_k.bias", KV, 0.0f, 0.1f);
      vec(p + "attn_v.bias", KV, 0.0f, 0.1f);
    }
    if (a == "qwen3" || a == "gemma3" || a == "qwen3moe" || a == "glm4moe" || a == "lfm2" || qwen35) {
      vec(p + "attn_q_norm.weight", hd, 1.0f, 0.05f);
      vec(p + "attn_k_norm.weight", hd, 1.0f, 0.05f);
    }
    if (a == "gemma3" || a == "glm4") {
      vec(p + "post_attention_norm.weight", E, 1.0f, 0.05f);
      vec(p + "post_ffw_norm.weight", E, 1.0f, 0.05f);
    }
    const bool post_attention_named = a == "glm4moe" || a == "gpt-oss" || qwen35;
    vec(p + (post_attention_named ? "post_attention_norm.weight" : "ffn_norm.weight"), E, 1.0f, 0.05f);
    const bool moe =
        (is_moe_arch(a) || (a == "mistral3" && s.n_expert > 0)) && !(has_dense_lead(a) && il < s.n_dense_lead);
    if (moe) return write_experts(p);
    write_dense_ffn(p, s.n_ff, a == "phi3" || a == "glm4");
  }
  // deepseek2: the low-rank query, the latent + RoPE key projection, k_b and v_b per head.
  void write_latent_attention(const std::string& p) const {
    const int64_t E = s.n_embd, H = s.n_head, R = s.kv_lora_rank, QR = s.q_lora_rank, qk = hd + s.mla_rope;
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
    if (QR > 0) {
      matrix(p + "attn_q_a.weight", E, QR, in_scale);
      vec(p + "attn_q_a_norm.weight", QR, 1.0f, 0.05f);
      matrix(p + "attn_q_b.weight", QR, H * qk, 1.0f / std::sqrt(static_cast<float>(QR)));
    } else {
      matrix(p + "attn_q.weight", E, H * qk, in_scale);
    }
    matrix(p + "attn_kv_a_mqa.weight", E, R + s.mla_rope, in_scale);
    vec(p + "attn_kv_a_norm.weight", R, 1.0f, 0.05f);
    tensor3(p + "attn_k_b.weight", hd, R, H, 1.0f / std::sqrt(static_cast<float>(hd)));
    tensor3(p + "attn_v_b.weight", R, hd, H, 1.0f / std::sqrt(static_cast<float>(R)));
    matrix(p + "attn_output.weight", H * hd, E, 1.0f / std::sqrt(static_cast<float>(H * hd)));
  }
  void write_dense_ffn(const std::string& p, int64_t F, bool fused, const std::string& suffix = "") const {
    const int64_t E = s.n_embd;
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
    if (fused) {
      matrix(p + "ffn_up" + suffix + ".weight", E, 2 * F, in_scale);  // [gate; up]
    } else {
      matrix(p + "ffn_gate" + suffix + ".weight", E, F, in_scale);
      matrix(p + "ffn_up" + suffix + ".weight", E, F, in_scale);
    }
    matrix(p + "ffn_down" + suffix + ".weight", F, E, 1.0f / std::sqrt(static_cast<float>(F)));
  }
  // The router, the 3-D expert tensors [in, out, n_expert], glm4moe's selection bias and shared expert.
  void write_experts(const std::string& p) const {
    const int64_t E = s.n_embd, F = ff_exp(s), NE = s.n_expert;
    const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
    matrix(p + "ffn_gate_inp.weight", E, NE, in_scale);
    tensor3(p + "ffn_gate_exps.weight", E, F, NE, in_scale);
    tensor3(p + "ffn_up_exps.weight", E, F, NE, in_scale);
    tensor3(p + "ffn_down_exps.weight", F, E, NE, 1.0f / std::sqrt(static_cast<float>(F)));
    if (s.arch == "gpt-oss") {  // router and expert biases, [n_ff_exp or n_embd, n_expert]
      vec(p + "ffn_gate_inp.bias", NE, 0.0f, 0.05f);
      bias2(p + "ffn_gate_exps.bias", F, NE);
      bias2(p + "ffn_up_exps.bias", F, NE);
      bias2(p + "ffn_down_exps.bias", E, NE);
    }
    if (s.arch == "glm4moe" || s.arch == "deepseek2") {
      vec(p + "exp_probs_b.bias", NE, 0.0f, 0.05f);
      write_dense_ffn(p, F * s.n_expert_shared, false, "_shexp");
    }
    if (s.arch == "qwen35moe") {  // one shared expert, its output gated by sigmoid(w . x)
      write_dense_ffn(p, F, false, "_shexp");
      vec(p + "ffn_gate_inp_shexp.weight", E, 0.0f, in_scale);
    }
  }
};

// The architecture's hyper-parameters (<arch>.* keys).
void write_metadata(GgufWriter& w, const SyntheticSpec& s, int32_t hd) {
  const std::string& a = s.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "kvscope synthetic " + a + " (RANDOM WEIGHTS)");
  w.set_bool("kvscope.synthetic", true);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  if (a != "gemma4") w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32(a + ".rope.freq_base", s.rope_base);
  if (a == "gemma4") {
    write_gemma4_metadata(w, s, hd);
  } else if (a == "deepseek2") {  // llama.cpp's latent form: one KV "head" of latent + RoPE key
    w.set_u32(a + ".attention.head_count_kv", 1);
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(s.kv_lora_rank + s.mla_rope));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(s.kv_lora_rank));
    w.set_u32(a + ".attention.key_length_mla", static_cast<uint32_t>(hd + s.mla_rope));
    w.set_u32(a + ".attention.value_length_mla", static_cast<uint32_t>(hd));
    w.set_u32(a + ".attention.kv_lora_rank", static_cast<uint32_t>(s.kv_lora_rank));
    // Written even when 0: llama.cpp requires it unless the layer count says "V2-Lite".
    w.set_u32(a + ".attention.q_lora_rank", static_cast<uint32_t>(s.q_lora_rank));
    w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(s.mla_rope));
  } else {
    w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(hd));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(hd));
    w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(s.rope_dim > 0 ? s.rope_dim : hd));
  }
  if (!s.rope_scaling.empty()) {
    w.set_string(a + ".rope.scaling.type", s.rope_scaling);
    w.set_f32(a + ".rope.scaling.factor", s.rope_factor);
    if (s.rope_orig_ctx > 0)
      w.set_u32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(s.rope_orig_ctx));
    if (s.yarn_log_mul != 0.0f) w.set_f32(a + ".rope.scaling.yarn_log_multiplier", s.yarn_log_mul);
  }
  if (a == "gpt-oss") w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (a == "lfm2") write_lfm2_metadata(w, s);
  if (a == "granitehybrid") write_granite_metadata(w, s);
  if (a == "qwen35" || a == "qwen35moe") write_qwen35_metadata(w, s, hd);
  if (a == "qwen35moe") w.set_u32(a + ".expert_shared_feed_forward_length", static_cast<uint32_t>(ff_exp(s)));
  if (a == "gemma3") {
    w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
    w.set_u32(a + ".attention.sliding_window_pattern", static_cast<uint32_t>(s.swa_pattern));
  }
  if (s.n_expert > 0) {
    w.set_u32(a + ".expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_u32(a + ".expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(ff_exp(s)));
    if (s.n_expert_group > 0) {
      w.set_u32(a + ".expert_group_count", static_cast<uint32_t>(s.n_expert_group));
      w.set_u32(a + ".expert_group_used_count", static_cast<uint32_t>(s.n_group_used));
    }
  }
  if (a == "glm4moe" || a == "deepseek2") {
    w.set_u32(a + ".expert_shared_count", static_cast<uint32_t>(s.n_expert_shared));
    w.set_u32(a + ".leading_dense_block_count", static_cast<uint32_t>(s.n_dense_lead));
    w.set_u32(a + ".expert_gating_func", 2);  // sigmoid, as GLM-4.5 and DeepSeek-V3
    w.set_bool(a + ".expert_weights_norm", true);
    w.set_f32(a + ".expert_weights_scale", 2.5f);
  }
}

// Throws std::runtime_error naming what makes the spec unwritable.
void check_spec(const SyntheticSpec& s) {
  const auto& archs = supported_architectures();
  if (std::find(archs.begin(), archs.end(), s.arch) == archs.end())
    throw std::runtime_error("make-model: unknown architecture '" + s.arch + "'");
  if (s.n_vocab < 259) throw std::runtime_error("make-model: vocabulary must have at least 259 tokens");
  if (s.n_layer < 1 || s.n_embd < 1 || s.n_head < 1 || s.n_head_kv < 1 || s.n_ff < 1 || s.n_head % s.n_head_kv)
    throw std::runtime_error("make-model: inconsistent shape (heads must divide, sizes positive)");
  const int32_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t blk = ggml_type_info(s.dtype).block_elems;
  if (!ggml_type_supported(s.dtype) || blk <= 0) throw std::runtime_error("make-model: unsupported dtype");
  if (s.n_embd % blk || s.n_ff % blk || (hd * s.n_head) % blk)
    throw std::runtime_error("make-model: n_embd, n_ff and n_head*head_dim must be multiples of the dtype block (" +
                             std::to_string(blk) + ")");

  if (s.arch == "deepseek2" && (s.kv_lora_rank < 1 || s.q_lora_rank < 0 || s.mla_rope < 2 || s.mla_rope % 2 ||
                                s.kv_lora_rank % blk || s.q_lora_rank % blk || hd % blk))
    throw std::runtime_error(
        "make-model: deepseek2 needs kv_lora_rank >= 1, an even RoPE width >= 2, and "
        "kv_lora_rank, q_lora_rank and head_dim multiples of the dtype block");
  if (s.arch == "gemma4" && (s.head_dim_swa < 2 || s.n_head_kv_swa < 1 || s.n_head % s.n_head_kv_swa ||
                             s.n_kv_shared < 0 || s.n_kv_shared > s.n_layer - 2 || s.swa_pattern < 2 ||
                             s.n_embd_per_layer < 0 || hd % 2 || s.head_dim_swa % blk || s.n_embd_per_layer % blk ||
                             (s.n_kv_shared > 0 && (!gemma4_swa(s, gemma4_first_shared(s) - 2) ||
                                                    gemma4_swa(s, gemma4_first_shared(s) - 1)))))
    throw std::runtime_error(
        "make-model: gemma4 needs --head-dim-swa, --n-head-kv-swa dividing the heads, a pattern >= 2, and "
        "--n-kv-shared that leaves a sliding then a full layer right before the layers that borrow KV");
  if (s.rope_dim < 0 || s.rope_dim % 2 || s.rope_dim > hd ||
      (s.arch == "qwen35" &&
       (s.full_attention_interval < 1 || s.n_layer % s.full_attention_interval || s.ssm_state < 1 ||
        s.ssm_k_heads < 1 || s.ssm_v_heads % s.ssm_k_heads || (s.ssm_state * s.ssm_v_heads) % blk)))
    throw std::runtime_error(
        "make-model: --rope-dim must be even and at most the head size; qwen35 needs an attention interval "
        "dividing the layers, value heads a multiple of key heads, and a value width that fits the dtype block");
  if (s.arch == "granitehybrid" && (s.swa_pattern < 2 || s.ssm_v_heads < 1 || (2 * s.n_embd) % s.ssm_v_heads ||
                                    s.ssm_k_heads < 1 || s.ssm_v_heads % s.ssm_k_heads || s.ssm_state < 1))
    throw std::runtime_error(
        "make-model: granitehybrid needs --swa-pattern >= 2 (every pattern-th layer attention), heads dividing "
        "2 x n-embd and groups dividing the heads");
  if ((is_moe_arch(s.arch) && s.n_expert <= 0) || s.n_expert < 0 ||
      (s.n_expert > 0 && (s.n_expert_used < 1 || s.n_expert_used > s.n_expert || ff_exp(s) % blk)))
    throw std::runtime_error("make-model: " + s.arch +
                             " needs --n-expert > 0 with 1 <= --n-expert-used <= n-expert and "
                             "an expert width that is a multiple of the dtype block");
}

}  // namespace

void write_synthetic_model(const SyntheticSpec& s, const std::string& path) {
  check_spec(s);
  const int32_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  GgufWriter w;
  write_metadata(w, s, hd);
  const std::string& a = s.arch;
  if (s.special_tokens.size() + s.user_tokens.size() + 259 > static_cast<size_t>(s.n_vocab))
    throw std::runtime_error("make-model: the vocabulary has no room for the special tokens");
  add_tokenizer(w, s.n_vocab, s.special_tokens, s.user_tokens);
  if (!s.chat_template.empty()) w.set_string("tokenizer.chat_template", s.chat_template);

  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto matrix = [&](const std::string& name, int64_t in, int64_t out, float scale) {
    std::vector<float> d(static_cast<size_t>(in * out));
    for (auto& x : d) x = normal(rng) * scale;
    w.add_tensor(name, {in, out}, s.dtype, d);
  };
  auto vec = [&](const std::string& name, int64_t n, float center, float spread) {
    std::vector<float> d(static_cast<size_t>(n));
    for (auto& x : d) x = center + spread * normal(rng);
    w.add_tensor(name, {n}, GgmlType::F32, d);
  };
  const int64_t E = s.n_embd;
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
  const bool gemma = a == "gemma3" || a == "gemma4";
  matrix("token_embd.weight", E, s.n_vocab, gemma ? 0.05f : 1.0f);
  vec(a == "lfm2" ? "token_embd_norm.weight" : "output_norm.weight", E, 1.0f, 0.05f);
  if (!s.tied_output && !gemma && a != "qwen2") matrix("output.weight", E, s.n_vocab, 4.0f * in_scale);
  if (a == "gemma4") {
    const int64_t LP = static_cast<int64_t>(s.n_layer) * s.n_embd_per_layer;
    if (LP > 0) {
      matrix("per_layer_token_embd.weight", LP, s.n_vocab, 0.05f);
      matrix("per_layer_model_proj.weight", E, LP, in_scale);
      vec("per_layer_proj_norm.weight", s.n_embd_per_layer, 1.0f, 0.05f);
    }
    std::vector<float> factors(static_cast<size_t>(hd / 2), 1e30f);  // unrotated pairs: an infinite wavelength
    std::fill(factors.begin(), factors.begin() + static_cast<int64_t>(s.rope_partial_full * (hd / 2)), 1.0f);
    w.add_tensor("rope_freqs.weight", {hd / 2}, GgmlType::F32, factors);
    for (int32_t il = 0; il < s.n_layer; ++il) write_gemma4_layer(s, il, hd, matrix, vec);
    w.write(path);
    return;
  }
  auto tensor3 = [&](const std::string& name, int64_t in, int64_t out, int64_t n, float scale) {
    std::vector<float> d(static_cast<size_t>(in * out * n));
    for (auto& x : d) x = normal(rng) * scale;
    w.add_tensor(name, {in, out, n}, s.dtype, d);
  };
  auto bias2 = [&](const std::string& name, int64_t n, int64_t m) {
    std::vector<float> d(static_cast<size_t>(n * m));
    for (auto& x : d) x = 0.05f * normal(rng);
    w.add_tensor(name, {n, m}, GgmlType::F32, d);
  };
  auto f32_shaped = [&](const std::string& name, std::vector<int64_t> shape, float center, float spread) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> d(static_cast<size_t>(n));
    for (auto& x : d) x = center + spread * normal(rng);
    w.add_tensor(name, shape, GgmlType::F32, d);
  };
  const LayerWriter lw{s, hd, matrix, vec, tensor3, f32_shaped, bias2};
  for (int32_t il = 0; il < s.n_layer; ++il) lw.write(il);
  w.write(path);
}

}  // namespace kvscope
