// Each architecture's switches, read from llama.cpp's graph for it (src/models/<arch>.cpp):
// which tensors it reads, where its norms sit, how it rotates, which multipliers it applies.
#include "model/arch_traits.h"

namespace kvscope {

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> archs = {"llama",  "qwen2", "qwen3",   "gemma3",    "qwen3moe",     "mistral3",
                                                 "phi3",   "glm4",  "glm4moe", "smollm3",   "gpt-oss",      "deepseek2",
                                                 "gemma4", "lfm2",  "qwen35",  "qwen35moe", "granitehybrid"};
  return archs;
}

namespace {

ArchTraits gemma3_traits() {
  ArchTraits t;
  t.rope = RopeStyle::Neox;
  t.act = FfnActivation::GeluTanh;
  t.qk_norm = true;
  t.post_norms = true;
  t.embed_scale = true;
  t.interleaved_swa = true;
  return t;
}

// Gemma 4: Gemma 3's layer plus per-layer head shapes, KV shared by the last layers, per-layer
// embeddings, V normalized, rope_freqs (its "proportional" RoPE) in the full layers.
ArchTraits gemma4_traits() {
  ArchTraits t = gemma3_traits();
  t.rope_freqs = true;
  t.per_layer_shapes = true;
  return t;
}

// llama-style models of 2025: Mistral Small 3.x (dense, or MoE when it has experts), SmolLM3.
ArchTraits llama_like_traits(const std::string& arch) {
  ArchTraits t;
  t.rope_freqs = arch != "smollm3";
  if (arch == "mistral3") {
    t.out_bias = true;
    t.ffn_bias = true;
    t.ffn_scales = true;
    t.expert_scales = true;
  }
  if (arch == "smollm3") t.no_rope_every = 4;
  return t;
}

// GLM-4 (dense): post-norms like Gemma's, [gate; up] in one matrix, adjacent-pair RoPE (NeoX
// halves when the file has M-RoPE sections, read in model_config.cpp). GLM-4.5 (glm4moe): NeoX
// RoPE, optional q/k norms, its FFN input norm named post_attention_norm.
ArchTraits glm_traits(const std::string& arch) {
  ArchTraits t;
  if (arch == "glm4") {
    t.post_norms = true;
    t.fused_gate_up = true;
  } else {
    t.rope = RopeStyle::Neox;
    t.qk_norm_if_present = true;
    t.ffn_norm_post_attention = true;
  }
  return t;
}

}  // namespace

ArchTraits traits_for(const std::string& arch) {
  ArchTraits t;
  if (arch == "lfm2") {  // LFM2: NeoX RoPE, q/k norms, short convolutions beside attention
    t.rope = RopeStyle::Neox;
    t.qk_norm = true;
    t.short_conv = true;
    t.interleaved_swa = true;  // with a sliding_window, every attention layer slides
    return t;
  }
  if (arch == "qwen35" || arch == "qwen35moe") {
    // Qwen3.5: Gated DeltaNet layers and gated full attention (NeoX RoPE over the first
    // rope.dimension_count dims, q/k norms); the FFN's input norm is named post_attention_norm.
    t.rope = RopeStyle::Neox;
    t.qk_norm = true;
    t.ffn_norm_post_attention = true;
    t.gated_delta_net = true;
    t.attn_output_gate = true;
    t.ffn_scales = true;
    t.expert_scales = true;
    return t;
  }
  if (arch == "granitehybrid") {
    // Granite 4.0-H: Mamba-2 layers beside llama-style attention (adjacent-pair RoPE with
    // rope_freqs when it has RoPE at all), optional q/k/v biases, output and FFN biases.
    t.mamba2 = true;
    t.rope_freqs = true;
    t.out_bias = true;
    t.ffn_bias = true;
    return t;
  }
  if (arch == "llama" || arch == "mistral3" || arch == "smollm3") return llama_like_traits(arch);
  if (arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe") {
    t.rope = RopeStyle::Neox;
    t.qkv_bias = arch == "qwen2";
    t.qk_norm = arch != "qwen2";
    t.expert_scales = arch == "qwen3moe";
    return t;
  }
  if (arch == "gemma3") return gemma3_traits();
  if (arch == "gemma4") return gemma4_traits();
  if (arch == "phi3") {
    t.rope = RopeStyle::Neox;
    t.fused_gate_up = true;
    t.rope_long_short = true;
    return t;
  }
  if (arch == "glm4" || arch == "glm4moe") return glm_traits(arch);
  if (arch == "gpt-oss") {
    // MoE over alternating sliding (128 tokens in the released models) and full layers, a
    // learned sink logit per head, biases everywhere, the clamped SwiGLU.
    t.rope = RopeStyle::Neox;
    t.act = FfnActivation::SwigluOai;
    t.interleaved_swa = true;
    t.ffn_norm_post_attention = true;
    t.out_bias = true;
    t.attn_sinks = true;
    t.moe_biases = true;
    return t;
  }
  if (arch == "deepseek2") {  // latent attention (MlaConfig), MoE after dense leading layers
    t.latent_attention = true;
    return t;
  }
  std::string list;
  for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
  throw ModelError("unsupported architecture '" + arch + "' (kvscope runs: " + list + ")");
}

}  // namespace kvscope
