#include "cuda_model_support.h"

namespace kvscope {

namespace {

bool has_extras(const Affine& a) { return !a.bias.empty() || a.scale != 1.0f; }

}  // namespace

std::string cuda_missing_piece(const Model& model) {
  const ModelConfig& c = model.config;
  if (c.latent_kv())
    return "latent attention (" + c.arch + ": one compressed latent row per token) is not implemented on CUDA yet";
  if (c.has_recurrent())
    return "recurrent layers (" + c.arch + "'s " +
           (c.traits.gated_delta_net ? "Gated DeltaNet"
            : c.traits.mamba2        ? "Mamba-2 layers"
                                     : "short convolutions") +
           ", a state per sequence) are not implemented on CUDA yet";
  if (c.traits.per_layer_shapes)
    return "per-layer head shapes, shared KV layers and per-layer embeddings (" + c.arch +
           ") are not implemented on CUDA yet";
  if (c.traits.attn_sinks) return "learned attention sinks (attn_sinks) are not implemented on CUDA yet";
  if (c.moe.n_expert > 0) return "the mixture-of-experts FFN (" + c.arch + ") is not implemented on CUDA yet";
  // Llama 3.1+ per-pair RoPE frequency factors (and phi3's LongRoPE) are CPU-only so far.
  if (c.rope_factors() != nullptr || !c.rope_factors_long.empty())
    return "RoPE frequency factors (rope_freqs.weight, rope_factors_long/short) are not implemented on CUDA yet";
  if (c.yarn.on() || c.yarn.attn_factor != 1.0f) return "YaRN RoPE scaling is not implemented on CUDA yet";
  if (c.traits.no_rope_every > 0) return "layers without RoPE (" + c.arch + ") are not implemented on CUDA yet";
  for (const LayerWeights& L : model.weights.layers) {
    if (has_extras(L.ao) || has_extras(L.a_gate) || has_extras(L.a_up) || has_extras(L.a_down) || L.aq.scale != 1.0f ||
        L.ak.scale != 1.0f || L.av.scale != 1.0f)
      return "per-tensor weight scales and output/FFN biases (" + c.arch + ") are not implemented on CUDA yet";
    if (L.aq.bias.empty() != L.ak.bias.empty() || L.aq.bias.empty() != L.av.bias.empty())
      return "q/k/v biases on only some of q, k and v are not implemented on CUDA yet";
  }
  return "";
}

}  // namespace kvscope
