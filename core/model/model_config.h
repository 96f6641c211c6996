#pragma once
// Hyper-parameters of a decoder-only transformer, read from GGUF metadata (<arch>.* keys) and
// checked for consistency. Architectures differ by a handful of switches (ArchTraits), so each
// one is a small delta on the llama forward rather than a copy of it.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvscope {

class GgufFile;

struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class RopeStyle { Normal, Neox };  // adjacent pairs (2i, 2i+1) vs halves (i, i + d/2)
// SwigluOai: gpt-oss's clamped SwiGLU, min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, +-7) + 1).
enum class FfnActivation { Silu, GeluTanh, SwigluOai };

// What an architecture's llama.cpp graph reads, switch by switch (src/models/<arch>.cpp). Files
// written by llama.cpp's fixture generator carry every tensor and key of every architecture, so
// a switch that is off means "present in the file but not part of this architecture".
struct ArchTraits {
  RopeStyle rope = RopeStyle::Normal;
  FfnActivation act = FfnActivation::Silu;
  bool qkv_bias = false;                 // qwen2: q/k/v biases required (elsewhere used when present)
  bool qk_norm = false;                  // qwen3, gemma3, qwen3moe: per-head RMSNorm of q and k before RoPE
  bool qk_norm_if_present = false;       // glm4moe: the same norms, optional (GLM-4.5 355B has them)
  bool post_norms = false;               // gemma3, glm4: post_attention_norm and post_ffw_norm on the branch outputs
  bool ffn_norm_post_attention = false;  // glm4moe: the FFN's input norm is named post_attention_norm
  bool embed_scale = false;              // gemma3: embeddings * sqrt(n_embd)
  bool interleaved_swa = false;          // gemma3: sliding-window and global layers
  bool fused_gate_up = false;            // phi3, glm4: ffn_up holds [gate; up] (2 * n_ff rows)
  bool out_bias = false;                 // mistral3: attn_output.bias
  bool ffn_bias = false;                 // mistral3: ffn_{gate,up,down}.bias
  bool ffn_scales = false;               // mistral3: the dense FFN's per-tensor .scale multipliers
  bool expert_scales = false;            // qwen3moe, mistral3: per-expert .scale multipliers
  bool rope_freqs = false;               // llama, mistral3: rope_freqs.weight divides pair i's angle
  bool rope_long_short = false;          // phi3: rope_factors_long/short, chosen by the context length
  int32_t no_rope_every = 0;             // smollm3 (4): layer il has no RoPE when (il + 1) % 4 == 0
  bool attn_sinks = false;               // gpt-oss: a learned logit per head in every softmax (attn_sinks)
  bool moe_biases = false;               // gpt-oss: router and per-expert gate/up/down biases
  bool latent_attention = false;         // deepseek2: multi-head latent attention (MlaConfig)
  // gemma4: sliding and full layers with their own head shapes and RoPE (LayerShape), V
  // RMS-normed without a weight, rope_freqs on the full layers only, q.k unscaled, per-layer
  // embeddings, layer output scales, later layers reading an earlier layer's KV.
  bool per_layer_shapes = false;
  // lfm2: short-convolution layers (a fixed state per sequence, no KV) among attention layers
  // (head_count_kv 0 marks them), whose output norm is named token_embd_norm.
  bool short_conv = false;
  // qwen35, qwen35moe: Gated DeltaNet layers (GdnConfig; a fixed state per sequence) among
  // attention layers whose query projection also gives a sigmoid gate on each head's output.
  bool gated_delta_net = false;
  bool attn_output_gate = false;
  // granitehybrid (Granite 4.0-H): Mamba-2 layers (Mamba2Config) among attention layers (0 KV
  // heads marks them, as lfm2), with Granite's embedding, residual and logit multipliers.
  bool mamba2 = false;
};

// Granite 4.0-H's Mamba-2 layers (llama.cpp's build_mamba2_layer): in_proj gives z (d_inner),
// [x; B; C] (conv_channels()) and dt (n_heads); a causal depthwise conv of conv_kernel taps
// with a bias and SiLU over [x; B; C]; then per head a d_state x head_dim() state h updated as
// h = exp(softplus(dt) A) h + softplus(dt) B x^T and read as y = C^T h + D x; heads share B
// and C in n_groups groups (head h reads group h / (n_heads / n_groups)).
struct Mamba2Config {
  int32_t conv_kernel = 0;  // ssm.conv_kernel
  int32_t d_inner = 0;      // ssm.inner_size
  int32_t d_state = 0;      // ssm.state_size
  int32_t n_heads = 0;      // ssm.time_step_rank
  int32_t n_groups = 0;     // ssm.group_count
  int32_t head_dim() const { return n_heads > 0 ? d_inner / n_heads : 0; }
  int64_t conv_channels() const { return d_inner + 2LL * n_groups * d_state; }
  int64_t in_proj_rows() const { return d_inner + conv_channels() + n_heads; }
  int64_t conv_floats() const { return (conv_kernel - 1) * conv_channels(); }
  int64_t state_floats() const { return conv_floats() + static_cast<int64_t>(d_state) * d_inner; }
};

// Qwen3.5's Gated DeltaNet layers (llama.cpp's ssm.* keys, src/models/qwen35.cpp): a causal
// depthwise convolution of conv_kernel taps over [q; k; v] (conv_channels() wide), then per value
// head a d_state x d_state matrix S updated each token by the gated delta rule. n_k_heads query
// and key heads are shared by n_v_heads value heads (head h reads key head h % n_k_heads).
struct GdnConfig {
  int32_t conv_kernel = 0;  // ssm.conv_kernel
  int32_t d_state = 0;      // ssm.state_size: the head width of q, k and v
  int32_t n_v_heads = 0;    // ssm.time_step_rank
  int32_t n_k_heads = 0;    // ssm.group_count
  int64_t key_dim() const { return static_cast<int64_t>(n_k_heads) * d_state; }
  int64_t value_dim() const { return static_cast<int64_t>(n_v_heads) * d_state; }  // ssm.inner_size
  int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }
  // One layer's state: conv_kernel - 1 past inputs per channel, then one S per value head.
  int64_t conv_floats() const { return (conv_kernel - 1) * conv_channels(); }
  int64_t state_floats() const { return conv_floats() + static_cast<int64_t>(n_v_heads) * d_state * d_state; }
};

// One layer's attention and FFN sizes where they differ by layer (gemma4: sliding layers of
// head 256, full layers of head 512 and fewer KV heads, wider FFNs in the KV-sharing layers).
// kv_source: the layer whose K/V this layer reads (itself, or an earlier layer of the same kind
// that it borrows from: gemma4's attention.shared_kv_layers, llama.cpp's n_layer_kv_from_start).
struct LayerShape {
  int32_t n_head_kv = 0, head_dim = 0, rope_dim = 0, n_ff = 0, kv_source = 0;
};

// DeepSeek's multi-head latent attention (V2/V3/R1, Kimi K2), as llama.cpp runs it ("absorbed"):
// each token stores ONE row per layer, its compressed latent c (kv_lora_rank values, RMS-normed)
// followed by its RoPE key (rope_dim values, shared by every head). That row is the key of every
// head; its first kv_lora_rank values are also the value. A head's query is its no-RoPE part
// multiplied into latent space by attn_k_b, then its RoPE part; a head's output (kv_lora_rank
// wide) goes back through attn_v_b to v_dim before attn_output. So the cache holds
// (kv_lora_rank + rope_dim) values per token and layer, whatever the number of heads:
// ModelConfig::head_dim is that width, n_head_kv is 1 (the files say so too).
struct MlaConfig {
  int32_t kv_lora_rank = 0;  // 0: not latent attention
  int32_t q_lora_rank = 0;   // q through attn_q_a / attn_q_b; 0 (V2-Lite): one attn_q matrix
  int32_t qk_nope = 0;       // a head's query and key dims without RoPE (key_length_mla - rope_dim)
  int32_t v_dim = 0;         // a head's value dims after attn_v_b (value_length_mla)
};

// The mixture-of-experts FFN (llama.cpp's build_moe_ffn): a router picks n_expert_used of
// n_expert experts per token, and only those experts' weights are read.
// SoftmaxOfChosen: gpt-oss picks the top k raw router logits, then softmaxes those k only.
enum class MoeGating { Softmax, Sigmoid, SoftmaxOfChosen };
struct MoeConfig {
  int32_t n_expert = 0;       // 0: a dense model
  int32_t n_expert_used = 0;  // experts per token (top-k)
  int32_t n_ff_exp = 0;       // rows of one expert's gate and up matrices
  int32_t n_shared = 0;       // shared experts, run on every token (n_ff_exp * n_shared wide)
  // qwen35moe: one shared expert n_ff_shared wide (expert_shared_feed_forward_length) whose
  // output is scaled by sigmoid(ffn_gate_inp_shexp . x); 0: the n_shared rule above.
  int32_t n_ff_shared = 0;
  int32_t n_dense_lead = 0;  // the first n_dense_lead layers keep a dense FFN of n_ff
  MoeGating gating = MoeGating::Softmax;
  bool norm_weights = false;    // the chosen experts' weights are divided by their sum
  float weights_scale = 1.0f;   // then multiplied by this
  bool selection_bias = false;  // exp_probs_b.bias: added to the scores for choosing only
  // Grouped routing (DeepSeek-V3: 8 groups, 4 kept): experts come in n_group equal groups, a
  // group scores the sum of its two best selection scores, and only the n_group_used best
  // groups' experts can be chosen. 0: off.
  int32_t n_group = 0, n_group_used = 0;
};

// YaRN RoPE scaling (rope.scaling.type = yarn: gpt-oss, DeepSeek-V3, Kimi K2), as ggml's
// rope_yarn computes it. Pair i's angle blends the interpolated angle (freq_scale x theta) with
// the original one: ramp(i) = ext_factor x (1 - clamp((i - low) / max(0.001, high - low), 0, 1)),
// where low and high are the pairs whose wavelength fits beta_fast and beta_slow turns into
// orig_ctx tokens (yarn_corr_dims, from the layer's base); cos and sin are scaled by mscale().
struct RopeYarn {
  float ext_factor = 0.0f;  // 0: no YaRN (llama.cpp uses 1 for yarn files)
  float beta_fast = 32.0f, beta_slow = 1.0f;
  int32_t orig_ctx = 0;      // rope.scaling.original_context_length
  float attn_factor = 1.0f;  // llama.cpp's cparams.yarn_attn_factor
  float freq_scale = 1.0f;   // 1 / rope.scaling.factor
  bool on() const { return ext_factor != 0.0f; }
  float mscale() const;  // attn_factor x (1 + 0.1 ln(1 / freq_scale)), in f32 as ggml
  void corr_dims(int32_t n_rot, float base, float* low, float* high) const;
};

struct ModelConfig {
  std::string arch;  // general.architecture
  std::string name;  // general.name (may be empty)
  ArchTraits traits;
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;  // attention.key_length, or n_embd / n_head
  int32_t n_ff = 0;
  int32_t n_ctx_train = 0;  // context_length
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  float rope_base_swa = 10000.0f;        // gemma3's sliding layers
  float rope_freq_scale = 1.0f;          // 1 / linear (or YaRN) scaling factor
  RopeYarn yarn;                         // YaRN's extrapolation mix and magnitude (off unless yarn)
  std::vector<float> rope_freq_factors;  // llama 3.1+ rope_freqs.weight: pair i's angle / factor[i]; empty: none
  // The per-pair RoPE divisors for an engine whose sequences may reach n_ctx tokens (0: the
  // trained context); nullptr when the model has none.
  const float* rope_factors(int32_t n_ctx = 0) const;
  // Layer il's divisors: gemma4 applies rope_freqs in its full-attention layers only.
  const float* layer_rope_factors(int32_t il, int32_t n_ctx = 0) const {
    return traits.per_layer_shapes && layer_is_swa(il) ? nullptr : rope_factors(n_ctx);
  }
  int32_t rope_dim = 0;             // rope.dimension_count (<= head_dim)
  int32_t sliding_window = 0;       // model's own window (gemma3), 0 if none
  int32_t swa_pattern = 0;          // gemma3: layer il is SWA iff il % pattern < pattern - 1
  std::vector<uint8_t> swa_layers;  // the pattern given per layer (gpt-oss files); overrides swa_pattern
  float attn_scale = 0.0f;          // multiplier of q.k; 1/sqrt(head_dim) by default
  MoeConfig moe;
  MlaConfig mla;
  std::vector<LayerShape> shapes;  // per layer when traits.per_layer_shapes; empty: every layer as above
  int32_t n_embd_per_layer = 0;    // gemma4's per-layer embedding width (0: none)
  float final_softcap = 0.0f;      // final_logit_softcapping: logits = cap tanh(logits / cap); 0: off
  // Hybrid recurrent models (lfm2): 1 for a layer that keeps a fixed state per sequence instead
  // of KV; empty for the others. conv_l_cache: the short convolution's taps (the state holds
  // conv_l_cache - 1 past inputs per channel).
  std::vector<uint8_t> recurrent;
  int32_t conv_l_cache = 0;
  GdnConfig gdn;        // qwen35's recurrent layers (traits.gated_delta_net)
  Mamba2Config mamba2;  // granitehybrid's (traits.mamba2)
  // Granite's multipliers (0: none): embeddings x embedding_scale, each branch's output x
  // residual_scale before its residual add, logits / logit_scale.
  float embedding_scale = 0.0f, residual_scale = 0.0f, logit_scale = 0.0f;
  bool no_rope = false;  // granitehybrid without rope.scaling.finetuned (Granite 4.0-H): no RoPE at all
  // phi3's LongRoPE factors: long when the engine's context exceeds rope_orig_ctx (as llama.cpp
  // chooses by its n_ctx), short otherwise.
  std::vector<float> rope_factors_long, rope_factors_short;
  int32_t rope_orig_ctx = 0;  // rope.scaling.original_context_length (default: context_length)

  bool layer_is_swa(int32_t il) const {
    if (!traits.interleaved_swa) return false;
    if (!swa_layers.empty()) return swa_layers[static_cast<size_t>(il)] != 0;
    return swa_pattern > 0 && (il % swa_pattern) < swa_pattern - 1;
  }
  // Per-layer sizes: the shapes above, or the model-wide ones.
  const LayerShape& shape(int32_t il) const;
  int32_t layer_head_dim(int32_t il) const { return shapes.empty() ? head_dim : shape(il).head_dim; }
  int32_t layer_n_head_kv(int32_t il) const { return shapes.empty() ? n_head_kv : shape(il).n_head_kv; }
  int32_t layer_rope_dim(int32_t il) const { return shapes.empty() ? rope_dim : shape(il).rope_dim; }
  int32_t layer_n_ff(int32_t il) const { return shapes.empty() ? n_ff : shape(il).n_ff; }
  int32_t kv_source(int32_t il) const { return shapes.empty() ? il : shape(il).kv_source; }
  bool layer_owns_kv(int32_t il) const { return kv_source(il) == il; }
  bool layer_is_recurrent(int32_t il) const { return !recurrent.empty() && recurrent[static_cast<size_t>(il)] != 0; }
  bool has_recurrent() const;
  // Whether layer il stores K/V of its own: not a recurrent layer, not one that borrows.
  bool layer_keeps_kv(int32_t il) const { return !layer_is_recurrent(il) && layer_owns_kv(il); }
  // Floats of one sequence's recurrent state in one recurrent layer, and over all of them.
  int64_t state_floats_per_layer() const;
  int64_t state_floats_per_seq() const;
  int32_t layer_q_dim(int32_t il) const { return n_head * layer_head_dim(il); }
  // Rows of the query projection: the query, and with attn_output_gate each head's gate after it.
  int32_t layer_q_rows(int32_t il) const { return (traits.attn_output_gate ? 2 : 1) * layer_q_dim(il); }
  int32_t layer_kv_dim(int32_t il) const { return layer_n_head_kv(il) * layer_head_dim(il); }
  int32_t max_q_dim() const;  // the widest layer's, for activation buffers
  int32_t max_kv_dim() const;
  int32_t max_n_ff() const;
  bool layer_is_moe(int32_t il) const { return moe.n_expert > 0 && il >= moe.n_dense_lead; }
  bool layer_has_rope(int32_t il) const {
    return !no_rope && (traits.no_rope_every <= 0 || (il + 1) % traits.no_rope_every != 0);
  }
  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  // Latent attention: the cache row is key and value at once (MlaConfig), there is no V array.
  bool latent_kv() const { return mla.kv_lora_rank > 0; }
  // Width of one head's attention output (the values it sums): head_dim, or the latent's.
  int32_t attn_v_dim() const { return latent_kv() ? mla.kv_lora_rank : head_dim; }
  // Where the RoPE dims start in a query or cache row: 0, or after the latent.
  int32_t rope_offset() const { return latent_kv() ? mla.kv_lora_rank : 0; }
  // Keys and values of one token over all layers, in elements (x bytes/elem for the KV dtype).
  // Experts change the FFN only: an MoE model's KV per token is its attention's, whatever n_expert.
  // Layers that borrow another layer's KV store none.
  int64_t kv_elements_per_token() const;

  // Throws ModelError naming the missing or inconsistent key (unknown arch, 0 layers, heads
  // that do not divide, ...).
  static ModelConfig from_gguf(const GgufFile& f);
};

// Architectures kvscope runs.
const std::vector<std::string>& supported_architectures();

}  // namespace kvscope
