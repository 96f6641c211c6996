#pragma once
// Random-weight models written as real GGUF files: for tests (any architecture, shape, dtype),
// benchmarks, and as the app's last-resort default model. Clearly labelled: general.name says
// "RANDOM WEIGHTS" and kvscope.synthetic = true.
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"

namespace kvscope {

struct SyntheticSpec {
  std::string arch = "llama";  // any of supported_architectures()
  int32_t n_vocab = 512;       // >= 259 (unk, bos, eos and 256 byte tokens)
  int32_t n_embd = 256;
  int32_t n_layer = 2;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t head_dim = 0;  // 0: n_embd / n_head
  int32_t n_ff = 768;
  int32_t n_ctx = 4096;
  float rope_base = 10000.0f;
  int32_t sliding_window = 32;     // gemma3 only
  int32_t swa_pattern = 3;         // gemma3 only
  GgmlType dtype = GgmlType::F32;  // matrices; norms stay f32
  bool tied_output = false;
  uint64_t seed = 1;
  // Mixture of experts (qwen3moe, glm4moe; mistral3 when n_expert > 0). qwen3moe and glm4moe
  // need n_expert > 0; n_ff_exp 0 means n_ff / n_expert_used.
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_exp = 0;
  int32_t n_expert_shared = 1;  // glm4moe, deepseek2: shared experts
  int32_t n_dense_lead = 1;     // glm4moe, deepseek2: leading dense layers
  // deepseek2's latent attention (model_config.h MlaConfig): heads of head_dim no-RoPE dims plus
  // mla_rope RoPE dims for q.k, head_dim value dims; the cache row is kv_lora_rank + mla_rope.
  int32_t kv_lora_rank = 128;
  int32_t q_lora_rank = 96;  // 0: one attn_q matrix (DeepSeek-V2-Lite)
  int32_t mla_rope = 32;
  int32_t n_expert_group = 0, n_group_used = 0;  // grouped routing (deepseek2); 0: off
  // gemma4 (head_dim and n_head_kv are its full-attention layers'; layer il slides when
  // il % swa_pattern < swa_pattern - 1, as gemma3): the sliding layers' head size and KV heads,
  // how many last layers borrow KV (their FFN twice n_ff wide, as Gemma 4's double-wide MLP),
  // the per-layer embedding width, the final logit soft-cap (0: no key, which llama.cpp reads as 30), the share of the full layers'
  // pairs RoPE turns (the rest get factor 1e30, Gemma 4's "proportional" RoPE), the sliding
  // layers' RoPE base, and full layers without attn_v (V = K, Gemma 4 31B).
  int32_t head_dim_swa = 0, n_head_kv_swa = 0, n_kv_shared = 0, n_embd_per_layer = 0;
  float final_softcap = 0.0f, rope_partial_full = 1.0f, rope_base_swa = 10000.0f;
  bool k_eq_v = false;
  // Qwen3.5 (qwen35): every full_attention_interval-th layer is gated attention, the others
  // Gated DeltaNet with ssm_v_heads value heads, ssm_k_heads query/key heads of ssm_state dims
  // and a 4-tap conv. rope_dim: the dims of a head RoPE turns (0: all; Qwen3.5 turns a quarter).
  int32_t full_attention_interval = 4, ssm_state = 32, ssm_v_heads = 4, ssm_k_heads = 2, rope_dim = 0;
  // RoPE scaling written as rope.scaling.* keys: "" (none), "linear" or "yarn".
  std::string rope_scaling;
  float rope_factor = 1.0f;
  int32_t rope_orig_ctx = 0;  // rope.scaling.original_context_length; 0: not written
  float yarn_log_mul = 0.0f;  // deepseek2: rope.scaling.yarn_log_multiplier, as converters write it (0.1 x)
  // A chat model's vocabulary: control tokens (e.g. "<|im_start|>", "<|im_end|>") that take the
  // last ids, and tokenizer.chat_template ("" : none written).
  std::vector<std::string> special_tokens;
  // User-defined tokens (type 4: matched in any text, printed as text), before the control
  // tokens: a reasoning model's "<think>" and "</think>", as Qwen3's GGUFs hold them.
  std::vector<std::string> user_tokens;
  std::string chat_template;
};

// Writes the model; throws std::runtime_error on a bad spec or I/O failure.
void write_synthetic_model(const SyntheticSpec& spec, const std::string& path);

}  // namespace kvscope
