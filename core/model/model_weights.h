#pragma once
// Views of a model's tensors in the GgufFile's in-memory copy of the tensor data (never a file
// mapping: see gguf_file.h), with every shape checked against the config. Small 1-D tensors
// (norms, biases) are converted to f32 vectors once.
#include <memory>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace kvscope {

// A matrix's optional extras as llama.cpp applies them: y = (W x) * scale + bias for attention
// (build_qkv, build_attn), y = (W x + bias) * scale for the FFN (build_ffn). scale is the
// per-tensor `<name>.scale` multiplier (1 when absent or unused by the architecture).
struct Affine {
  std::vector<float> bias;  // empty: none
  float scale = 1.0f;
};

// One MoE FFN: the router, each expert's matrices as views into the 3-D expert tensors (so only
// the routed experts' bytes are read), and the shared expert run on every token.
struct MoeWeights {
  TensorView router;                                    // ffn_gate_inp: [n_expert x n_embd]
  std::vector<float> selection_bias;                    // exp_probs_b: [n_expert] (glm4moe), empty otherwise
  std::vector<TensorView> gate, up;                     // [n_expert] of [n_ff_exp x n_embd]
  std::vector<TensorView> down;                         // [n_expert] of [n_embd x n_ff_exp]
  std::vector<float> gate_scale, up_scale, down_scale;  // [n_expert] multipliers, empty: none
  // gpt-oss: the router's bias [n_expert], each expert's output biases [n_expert][n_ff_exp] for
  // gate and up, [n_expert][n_embd] for down (empty: none).
  std::vector<float> router_bias, gate_bias, up_bias, down_bias;
  TensorView shared_gate, shared_up, shared_down;  // data == nullptr: no shared expert
  float shared_gate_scale = 1.0f, shared_up_scale = 1.0f, shared_down_scale = 1.0f;
  std::vector<float> shared_router;  // qwen35moe: [n_embd], sigmoid(. x) scales the shared output
};

// One Gated DeltaNet layer (GdnConfig; qwen35): in_proj gives [q; k; v] (attn_qkv), z the output
// gate (attn_gate), alpha and beta one value per value head; the depthwise conv kernel
// [conv_channels][conv_kernel] (taps oldest first), dt_bias and a (= -exp(A_log)) per value head,
// the per-head output norm, out_proj back to n_embd. Each matrix has its `.scale` multiplier.
struct GdnWeights {
  TensorView in_proj, z_proj, alpha_proj, beta_proj, out_proj;
  float in_scale = 1.0f, z_scale = 1.0f, alpha_scale = 1.0f, beta_scale = 1.0f, out_scale = 1.0f;
  std::vector<float> conv_kernel, dt_bias, a, norm;
};

// Latent attention's matrices (model_config.h MlaConfig; deepseek2). wq (in LayerWeights) holds
// the query when q_lora_rank is 0.
struct MlaWeights {
  TensorView wq_a, wq_b;         // [q_lora_rank x n_embd], [n_head * (qk_nope + rope) x q_lora_rank]
  std::vector<float> q_a_norm;   // [q_lora_rank]
  TensorView wkv_a;              // [kv_lora_rank + rope x n_embd]: the latent, then the RoPE key
  std::vector<float> kv_a_norm;  // [kv_lora_rank]
  std::vector<TensorView> k_b;   // [n_head] of [kv_lora_rank x qk_nope]: a head's query into latent space
  std::vector<TensorView> v_b;   // [n_head] of [v_dim x kv_lora_rank]: a head's output out of it
};

// One Mamba-2 layer (Mamba2Config; granitehybrid): in_proj to [z; x; B; C; dt], the depthwise
// conv kernel [conv_channels][conv_kernel] and its bias (empty: none), dt_bias, A (negative)
// and D per head, the grouped output norm [d_inner], out_proj; in and out `.scale` multipliers.
struct Mamba2Weights {
  TensorView in_proj, out_proj;
  float in_scale = 1.0f, out_scale = 1.0f;
  std::vector<float> conv_kernel, conv_bias, dt_bias, a, d, norm;
};

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  TensorView wq, wk, wv, wo;          // [q_dim x n_embd], [kv_dim x n_embd] x2, [n_embd x q_dim]
  Affine aq, ak, av, ao;              // q/k/v biases (qwen2, and any file that has them), scales
  std::vector<float> q_norm, k_norm;  // [head_dim] (qwen3, gemma3), empty otherwise
  std::vector<float> attn_sinks;      // [n_head] gpt-oss's learned sink logits, empty otherwise
  std::vector<float> post_attn_norm;  // [n_embd] (gemma3, glm4)
  std::vector<float> ffn_norm;        // [n_embd]
  TensorView w_gate, w_up, w_down;    // [n_ff x n_embd] x2, [n_embd x n_ff] (dense layers)
  Affine a_gate, a_up, a_down;        // mistral3's FFN biases and scales
  std::vector<float> post_ffw_norm;   // [n_embd] (gemma3, glm4)
  // gemma4's per-layer embedding: gate [n_embd_per_layer x n_embd], proj [n_embd x
  // n_embd_per_layer], post_norm [n_embd] (data == nullptr: none); its layer output scale.
  TensorView ple_gate, ple_proj;
  std::vector<float> ple_post_norm;
  float out_scale = 1.0f;
  bool v_from_k = false;  // gemma4 without attn_v (attention_k_eq_v): V is K's projection
  // lfm2's short-convolution layer (no q/k/v): in_proj [3 n_embd x n_embd] giving B, C and x,
  // the depthwise kernel [n_embd][conv_l_cache] (taps oldest first), out_proj [n_embd x n_embd].
  TensorView conv_in, conv_out;
  std::vector<float> conv_kernel;
  GdnWeights gdn;
  Mamba2Weights mamba2;
  bool moe = false;  // this layer's FFN is `experts`, not w_gate/w_up/w_down
  MoeWeights experts;
  MlaWeights mla;  // latent attention only (wk, wv unused)
};

struct ModelWeights {
  TensorView token_embd;           // [n_vocab x n_embd]
  std::vector<float> output_norm;  // [n_embd]
  TensorView output;               // [n_vocab x n_embd]; token_embd when tied
  bool tied_output = false;
  // gemma4's per-layer embeddings: per_layer_token_embd [n_layer * n_embd_per_layer x n_vocab],
  // per_layer_model_proj [n_layer * n_embd_per_layer x n_embd], per_layer_proj_norm [n_embd_per_layer].
  TensorView ple_token_embd, ple_model_proj;
  std::vector<float> ple_proj_norm;
  std::vector<LayerWeights> layers;
  uint64_t total_bytes = 0;  // bytes of all tensors in the file
  uint64_t n_params = 0;
  uint64_t n_active_params = 0;  // what one token reads: n_params less the experts it is not routed to
  // Shapes of the row ranges (fused q/k/v, [gate; up], one expert of a 3-D tensor) that views
  // above point to; shared so the views stay valid when the weights are copied.
  std::vector<std::shared_ptr<GgufTensorInfo>> slices;

  // Throws ModelError naming the missing tensor or the wrong shape.
  static ModelWeights from_gguf(const GgufFile& f, const ModelConfig& cfg);
};

}  // namespace kvscope
