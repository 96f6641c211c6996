#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/gguf_file.h"
#include "model/arch_traits.h"
#include "model/hparams.h"
#include "model/layer_shapes.h"
#include "model/recurrent_layers.h"
#include "model/moe_config.h"

namespace kvscope {

namespace {
struct Reader {
  const GgufFile& f;
  const std::string& arch;
  int64_t req_int(const std::string& key) const {
    auto v = f.get_int(arch + "." + key);
    if (!v) throw ModelError("missing hyper-parameter '" + arch + "." + key + "'");
    return *v;
  }
  int64_t opt_int(const std::string& key, int64_t def) const { return f.get_int(arch + "." + key).value_or(def); }
  double opt_float(const std::string& key, double def) const { return f.get_float(arch + "." + key).value_or(def); }
};

// A per-pair RoPE factor tensor (rope_dim / 2 positive f32 values); empty when absent.
std::vector<float> read_rope_factors(const GgufFile& f, const std::string& name, int32_t rope_dim) {
  const GgufTensorInfo* rf = f.find_tensor(name);
  if (!rf) return {};
  if (rf->type() != GgmlType::F32 || rf->n_elements() != rope_dim / 2)
    throw ModelError(name + " must be f32 with rope.dimension_count / 2 = " + std::to_string(rope_dim / 2) +
                     " values, not " + ggml_type_name(rf->raw_type) + " with " + std::to_string(rf->n_elements()));
  std::vector<float> v(static_cast<size_t>(rope_dim / 2));
  std::memcpy(v.data(), f.view(*rf).data, v.size() * sizeof(float));
  for (float x : v)
    if (!(x > 0.0f) || !std::isfinite(x)) throw ModelError(name + " holds a factor that is not a positive number");
  return v;
}

// Qwen3.5's interleaved M-RoPE (ggml's IMROPE): pair i takes the t, h or w position by i % 3
// within the first 3 x section entries, else the fourth. For text t = h = w = the position and
// the fourth is 0, so NeoX RoPE over rope_dim is exact unless a rotated pair falls in the fourth.
void read_interleaved_rope_sections(const Reader& r, ModelConfig& c) {
  const GgufValue* v = r.f.find(c.arch + ".rope.dimension_sections");
  if (!v || v->type != GgufValueType::ARRAY) return;
  std::vector<int64_t> s = v->as_int_array();
  s.resize(4, 0);
  const int64_t all = s[0] + s[1] + s[2] + s[3];
  if (all <= 0) return;
  for (int64_t i = 0; i < c.rope_dim / 2; ++i) {
    const int64_t sector = i % all, which = sector % 3;
    if (sector >= 3 * s[static_cast<size_t>(which)])
      throw ModelError(c.arch + ".rope.dimension_sections puts rotated pair " + std::to_string(i) +
                       " in the fourth (extra) section, which kvscope does not run");
  }
}

// GLM-4's M-RoPE sections (rope.dimension_sections, vision files). For text every token's
// t/h/w positions are its position and the fourth is 0, so sections that cover every rotated
// pair with t/h/w make it NeoX RoPE (llama.cpp's MROPE type); a pair in the fourth section
// would stay unrotated, which kvscope does not model, so such a file is refused.
void read_rope_sections(const Reader& r, ModelConfig& c) {
  if (c.traits.gated_delta_net) return read_interleaved_rope_sections(r, c);
  if (c.arch != "glm4" && c.arch != "glm4moe") return;
  const GgufValue* v = r.f.find(c.arch + ".rope.dimension_sections");
  if (!v || v->type != GgufValueType::ARRAY) return;
  std::vector<int64_t> s = v->as_int_array();
  s.resize(4, 0);
  if (s[0] <= 0 || s[1] <= 0) return;  // llama.cpp's use_mrope(): both t and h sections
  const int64_t thw = s[0] + s[1] + s[2], all = thw + s[3];
  if (all <= 0 || thw < std::min<int64_t>(all, c.rope_dim / 2))
    throw ModelError(c.arch +
                     ".rope.dimension_sections puts rotated pairs in the fourth (extra) section, which "
                     "kvscope does not run");
  c.traits.rope = RopeStyle::Neox;
}

// Which layers slide, and over how many tokens. The pattern is a number (every pattern-th layer
// is global; real Gemma 3 files omit it and llama.cpp uses 6, for gpt-oss 2) or one flag per layer.
void read_sliding_layers(const GgufFile& f, const Reader& r, ModelConfig& c) {
  const std::string key = c.arch + ".attention.sliding_window";
  c.sliding_window = checked_i32(r.opt_int("attention.sliding_window", 0), key, 0, int64_t(1) << 30);
  if (c.arch == "gpt-oss" && c.sliding_window == 0) throw ModelError(key + " is 0, but gpt-oss has sliding layers");
  const GgufValue* v = f.find(key + "_pattern");
  if (v && v->type == GgufValueType::ARRAY) {
    const std::vector<int64_t> flags = v->as_int_array();
    if (static_cast<int64_t>(flags.size()) < c.n_layer)
      throw ModelError(key + "_pattern has " + std::to_string(flags.size()) + " entries for " +
                       std::to_string(c.n_layer) + " layers");
    for (int32_t il = 0; il < c.n_layer; ++il) c.swa_layers.push_back(flags[static_cast<size_t>(il)] != 0 ? 1 : 0);
    return;
  }
  c.swa_pattern = checked_i32(r.opt_int("attention.sliding_window_pattern", c.arch == "gpt-oss" ? 2 : 6),
                              key + "_pattern", 1, 4096);
}

// YaRN, with llama.cpp's settings (llama_context's cparams): ext_factor 1, beta 32 / 1, and the
// attention factor that cancels get_mscale against rope_yarn's own (1 + 0.1 ln factor). For
// deepseek2 (rope.scaling.yarn_log_multiplier) the graph also scales q.k by mscale^2 (below).
void read_yarn(const Reader& r, ModelConfig& c) {
  RopeYarn& y = c.yarn;
  y.freq_scale = c.rope_freq_scale;
  y.orig_ctx = c.rope_orig_ctx;
  const float factor = 1.0f / c.rope_freq_scale;
  if (!(factor >= 1.0f)) throw ModelError(c.arch + ".rope.scaling.factor must be >= 1 for YaRN");
  y.ext_factor = 1.0f;
  auto get_mscale = [factor](float m) { return factor <= 1.0f ? 1.0f : 0.1f * m * std::log(factor) + 1.0f; };
  // Only deepseek2's loader reads the log multiplier; with one, llama.cpp's factor is the ratio
  // get_mscale(mscale) / get_mscale(mscale_all_dim), which is 1 for deepseek2 (it sets mscale to
  // mscale_all_dim), and its graph applies the magnitude through q.k's scale instead.
  const float log_mul = c.traits.latent_attention
                            ? static_cast<float>(r.opt_float("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1f
                            : 0.0f;
  y.attn_factor = log_mul != 0.0f ? 1.0f : get_mscale(1.0f);
  y.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  y.attn_factor *= static_cast<float>(r.opt_float("rope.scaling.attn_factor", 1.0));
}

// RoPE: base frequencies, linear or llama3 scaling, rotated dimensions, per-pair factors.
void read_rope(const GgufFile& f, const Reader& r, ModelConfig& c) {
  c.rope_base = static_cast<float>(r.opt_float("rope.freq_base", 10000.0));
  c.rope_base_swa = static_cast<float>(r.opt_float("rope.freq_base_swa", 10000.0));
  if (!(c.rope_base > 0.0f) || !(c.rope_base_swa > 0.0f)) throw ModelError("rope.freq_base must be positive");
  double scale = r.opt_float("rope.scale_linear", 0.0);
  if (scale == 0.0) {
    const std::string type = f.get_string(c.arch + ".rope.scaling.type").value_or("none");
    if (type == "linear" || type == "yarn")
      scale = r.opt_float("rope.scaling.factor", 1.0);
    else if (type == "llama3" && f.find_tensor("rope_freqs.weight")) {
      // llama 3.1+: the scaling is entirely in the per-dimension factors read below.
    } else if (type != "none" && type != "")
      throw ModelError("rope scaling type '" + type + "' is not supported yet");
  }
  c.rope_freq_scale = scale > 0.0 ? static_cast<float>(1.0 / scale) : 1.0f;
  c.rope_dim =
      checked_i32(r.opt_int("rope.dimension_count", c.head_dim), c.arch + ".rope.dimension_count", 2, c.head_dim);
  if (c.rope_dim % 2 != 0) throw ModelError("rope.dimension_count must be even");
  // Llama 3.1+ GGUFs carry their RoPE scaling as per-pair frequency divisors (rope_freqs.weight,
  // rope_dim/2 f32 values): llama.cpp rotates pair i by pos * freq_scale * base^(-2i/d) / factor_i.
  // phi3 carries two such sets (LongRoPE) and picks one by the context length.
  if (c.traits.rope_freqs) c.rope_freq_factors = read_rope_factors(f, "rope_freqs.weight", c.rope_dim);
  if (c.traits.rope_long_short) {
    c.rope_factors_long = read_rope_factors(f, "rope_factors_long.weight", c.rope_dim);
    c.rope_factors_short = read_rope_factors(f, "rope_factors_short.weight", c.rope_dim);
  }
  c.rope_orig_ctx = checked_i32(r.opt_int("rope.scaling.original_context_length", c.n_ctx_train),
                                c.arch + ".rope.scaling.original_context_length", 0, int64_t(1) << 30);
  if (f.get_string(c.arch + ".rope.scaling.type").value_or("") == "yarn") read_yarn(r, c);
  read_rope_sections(r, c);
}

// deepseek2's latent attention, in the form llama.cpp converts it to since 2025 (the cache row
// is key_length = kv_lora_rank + rope_dim wide, value_length = kv_lora_rank, one KV head).
void read_latent_attention(const Reader& r, ModelConfig& c) {
  const std::string a = c.arch + ".attention.";
  if (!r.f.find(a + "key_length_mla"))
    throw ModelError(a +
                     "key_length_mla is missing: this deepseek2 file predates llama.cpp's latent-attention "
                     "form (attn_k_b / attn_v_b); convert the model again with a current convert_hf_to_gguf.py");
  MlaConfig& m = c.mla;
  m.kv_lora_rank = checked_i32(r.req_int("attention.kv_lora_rank"), a + "kv_lora_rank", 1, 65536);
  m.q_lora_rank = checked_i32(r.opt_int("attention.q_lora_rank", 0), a + "q_lora_rank", 0, 65536);
  const int32_t k_mla = checked_i32(r.req_int("attention.key_length_mla"), a + "key_length_mla", 2, 4096);
  m.v_dim = checked_i32(r.req_int("attention.value_length_mla"), a + "value_length_mla", 1, 4096);
  m.qk_nope = k_mla - c.rope_dim;
  if (m.qk_nope < 1)
    throw ModelError(a + "key_length_mla " + std::to_string(k_mla) + " leaves no dims without RoPE (rope " +
                     std::to_string(c.rope_dim) + ")");
  if (c.head_dim != m.kv_lora_rank + c.rope_dim || c.n_head_kv != 1)
    throw ModelError(a + "key_length " + std::to_string(c.head_dim) + " and head_count_kv " +
                     std::to_string(c.n_head_kv) + " must be kv_lora_rank + rope = " +
                     std::to_string(m.kv_lora_rank + c.rope_dim) + " and 1 (one latent row per token)");
  const int64_t val_len = r.opt_int("attention.value_length", m.kv_lora_rank);
  if (val_len != m.kv_lora_rank)
    throw ModelError(a + "value_length " + std::to_string(val_len) + " != kv_lora_rank " +
                     std::to_string(m.kv_lora_rank));
  // llama.cpp scales q.k by 1/sqrt of the decompressed head's key width (times YaRN's mscale^2,
  // 1 without YaRN).
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(k_mla));
  // YaRN: deepseek2's graph pre-scales q.k by mscale^2, mscale = the original attention factor x
  // (1 + 0.1 yarn_log_multiplier ln(1 / freq_scale)); the file's multiplier carries a 0.1 that
  // llama.cpp cancels ([TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]).
  if (c.yarn.on()) {
    const float log_mul = static_cast<float>(r.opt_float("rope.scaling.yarn_log_multiplier", 0.0)) / 0.1f;
    const float attn_org = c.yarn.attn_factor * (1.0f + 0.1f * std::log(1.0f / c.rope_freq_scale));
    const float mscale = attn_org * (1.0f + 0.1f * log_mul * std::log(1.0f / c.rope_freq_scale));
    c.attn_scale = mscale * mscale / std::sqrt(static_cast<float>(k_mla));
  }
}

// Granite's multipliers, its q.k scale, and RoPE switched by rope.scaling.finetuned (true when
// absent, as llama_model_granite_hybrid::load_arch_hparams).
void read_granite_multipliers(const Reader& r, ModelConfig& c) {
  c.embedding_scale = static_cast<float>(r.opt_float("embedding_scale", 0.0));
  c.residual_scale = static_cast<float>(r.opt_float("residual_scale", 0.0));
  c.logit_scale = static_cast<float>(r.opt_float("logit_scale", 0.0));
  const float attn = static_cast<float>(r.opt_float("attention.scale", 0.0));
  if (attn != 0.0f) c.attn_scale = attn;
  for (float v : {c.embedding_scale, c.residual_scale, c.logit_scale, attn})
    if (!std::isfinite(v))
      throw ModelError(c.arch + ": a Granite multiplier (embedding, residual, logit or attention scale) is not finite");
  c.no_rope = !r.f.get_bool(c.arch + ".rope.scaling.finetuned").value_or(true);
}

// The vocabulary size: the tokenizer's token list and token_embd.weight's rows must agree.
void read_vocab_size(const GgufFile& f, ModelConfig& c) {
  if (const GgufValue* toks = f.find("tokenizer.ggml.tokens"); toks && toks->type == GgufValueType::ARRAY)
    c.n_vocab = static_cast<int32_t>(toks->arr.size());
  if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight")) {
    const int64_t rows = emb->ne.size() > 1 ? emb->ne[1] : 1;
    if (c.n_vocab == 0) c.n_vocab = static_cast<int32_t>(rows);
    if (rows != c.n_vocab)
      throw ModelError("vocabulary size mismatch: tokenizer has " + std::to_string(c.n_vocab) +
                       " tokens but token_embd.weight has " + std::to_string(rows) + " rows");
  }
  if (c.n_vocab <= 0) throw ModelError("no vocabulary: tokenizer.ggml.tokens and token_embd.weight are missing");
}
}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.get_string("general.architecture");
  if (!arch) throw ModelError("missing 'general.architecture': not a model file");
  c.arch = *arch;
  c.traits = traits_for(c.arch);
  c.name = f.get_string("general.name").value_or("");
  Reader r{f, c.arch};
  constexpr int64_t kBig = int64_t(1) << 24;
  c.n_embd = checked_i32(r.req_int("embedding_length"), c.arch + ".embedding_length", 1, kBig);
  c.n_layer = checked_i32(r.req_int("block_count"), c.arch + ".block_count", 1, 4096);
  // lfm2 and granitehybrid give head counts per layer (0 in their recurrent layers):
  // read_recurrent_layers reads them.
  const bool heads_per_layer = c.traits.short_conv || c.traits.mamba2;  // 0 KV heads: a recurrent layer
  c.n_head =
      heads_per_layer ? 1 : checked_i32(r.req_int("attention.head_count"), c.arch + ".attention.head_count", 1, 4096);
  // head_count_kv defaults to head_count (multi-head attention) as in llama.cpp.
  // Per-layer shapes (gemma4) may give these one per layer: read_layer_shapes reads them.
  const bool per_layer = c.traits.per_layer_shapes;
  // qwen35 may give them per layer too (0 in its recurrent layers): read_gated_delta_net reads them.
  c.n_head_kv =
      per_layer || heads_per_layer || c.traits.gated_delta_net
          ? 1
          : checked_i32(r.opt_int("attention.head_count_kv", c.n_head), c.arch + ".attention.head_count_kv", 1, 4096);
  c.n_ff = per_layer ? 1 : checked_i32(r.req_int("feed_forward_length"), c.arch + ".feed_forward_length", 1, kBig);
  c.n_ctx_train = checked_i32(r.opt_int("context_length", 2048), c.arch + ".context_length", 1, int64_t(1) << 30);
  if (heads_per_layer) read_recurrent_layers(f, c);
  if (c.traits.gated_delta_net) read_gated_delta_net(f, c);
  if (c.n_head % c.n_head_kv != 0)
    throw ModelError("head counts do not divide: " + std::to_string(c.n_head) + " query heads, " +
                     std::to_string(c.n_head_kv) + " KV heads");
  const int64_t key_len = r.opt_int("attention.key_length", c.n_embd % c.n_head == 0 ? c.n_embd / c.n_head : 0);
  if (key_len <= 0)
    throw ModelError("embedding_length " + std::to_string(c.n_embd) + " is not a multiple of head_count " +
                     std::to_string(c.n_head) + " and attention.key_length is missing");
  c.head_dim = checked_i32(key_len, c.arch + ".attention.key_length", 2, 4096);
  const int64_t val_len = r.opt_int("attention.value_length", c.head_dim);
  if (val_len != c.head_dim && !c.traits.latent_attention)
    throw ModelError("attention.value_length " + std::to_string(val_len) + " != key_length " +
                     std::to_string(c.head_dim) + " is not supported");
  c.rms_eps = static_cast<float>(r.opt_float("attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rms_eps > 0.0f) || !std::isfinite(c.rms_eps)) throw ModelError("layer_norm_rms_epsilon must be positive");
  read_rope(f, r, c);
  if (c.traits.interleaved_swa) read_sliding_layers(f, r, c);
  if (c.traits.short_conv) slide_attention_layers(c);
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.traits.latent_attention) read_latent_attention(r, c);
  if (per_layer) read_layer_shapes(f, c);
  if (c.traits.mamba2) read_granite_multipliers(r, c);
  c.moe = read_moe_config(f, c);

  read_vocab_size(f, c);
  return c;
}

const LayerShape& ModelConfig::shape(int32_t il) const {
  if (il < 0 || static_cast<size_t>(il) >= shapes.size())
    throw std::out_of_range("layer " + std::to_string(il) + " has no shape");
  return shapes[static_cast<size_t>(il)];
}

int32_t ModelConfig::max_q_dim() const {
  int32_t m = q_dim();
  for (int32_t il = 0; il < static_cast<int32_t>(shapes.size()); ++il) m = std::max(m, layer_q_dim(il));
  return m;
}

int32_t ModelConfig::max_kv_dim() const {
  int32_t m = kv_dim();
  for (int32_t il = 0; il < static_cast<int32_t>(shapes.size()); ++il) m = std::max(m, layer_kv_dim(il));
  return m;
}

int32_t ModelConfig::max_n_ff() const {
  int32_t m = n_ff;
  for (const LayerShape& s : shapes) m = std::max(m, s.n_ff);
  return m;
}

int64_t ModelConfig::kv_elements_per_token() const {
  if (shapes.empty() && recurrent.empty()) return (latent_kv() ? 1LL : 2LL) * n_layer * n_head_kv * head_dim;
  int64_t n = 0;
  for (int32_t il = 0; il < n_layer; ++il)
    if (layer_keeps_kv(il)) n += 2LL * layer_kv_dim(il);
  return n;
}

bool ModelConfig::has_recurrent() const {
  return std::any_of(recurrent.begin(), recurrent.end(), [](uint8_t r) { return r != 0; });
}

int64_t ModelConfig::state_floats_per_layer() const {
  if (traits.gated_delta_net) return gdn.state_floats();
  if (traits.mamba2) return mamba2.state_floats();
  return static_cast<int64_t>(conv_l_cache - 1) * n_embd;
}

int64_t ModelConfig::state_floats_per_seq() const {
  return static_cast<int64_t>(std::count(recurrent.begin(), recurrent.end(), uint8_t{1})) * state_floats_per_layer();
}

float RopeYarn::mscale() const { return attn_factor * (1.0f + 0.1f * std::log(1.0f / freq_scale)); }

// ggml_rope_yarn_corr_dims: the pair count whose wavelength turns `rotations` times in orig_ctx.
void RopeYarn::corr_dims(int32_t n_rot, float base, float* low, float* high) const {
  auto dim = [&](float rotations) {
    return static_cast<float>(n_rot) *
           std::log(static_cast<float>(orig_ctx) / (rotations * 2.0f * 3.14159265358979323846f)) /
           (2.0f * std::log(base));
  };
  *low = std::max(0.0f, std::floor(dim(beta_fast)));
  *high = std::min(static_cast<float>(n_rot - 1), std::ceil(dim(beta_slow)));
}

const float* ModelConfig::rope_factors(int32_t n_ctx) const {
  if (traits.rope_long_short && !rope_factors_long.empty()) {
    const int32_t ctx = n_ctx > 0 ? n_ctx : n_ctx_train;
    const std::vector<float>& v = ctx > rope_orig_ctx ? rope_factors_long : rope_factors_short;
    return v.empty() ? nullptr : v.data();
  }
  return rope_freq_factors.empty() ? nullptr : rope_freq_factors.data();
}

}  // namespace kvscope
