#pragma once
// Views of a model's tensors in the GgufFile's in-memory copy of the tensor data (never a file
// mapping: see gguf_file.h), with every shape checked against the config. Small 1-D tensors
// (norms, biases) are converted to f32 vectors once.
#include <memory>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/model_config.h"

namespace kvscope {

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  TensorView wq, wk, wv, wo;          // [q_dim x n_embd], [kv_dim x n_embd] x2, [n_embd x q_dim]
  std::vector<float> bq, bk, bv;      // qwen2 biases, empty otherwise
  std::vector<float> q_norm, k_norm;  // [head_dim] (qwen3, gemma3), empty otherwise
  std::vector<float> post_attn_norm;  // [n_embd] (gemma3)
  std::vector<float> ffn_norm;        // [n_embd]
  TensorView w_gate, w_up, w_down;    // [n_ff x n_embd] x2, [n_embd x n_ff]
  std::vector<float> post_ffw_norm;   // [n_embd] (gemma3)
};

struct ModelWeights {
  TensorView token_embd;           // [n_vocab x n_embd]
  std::vector<float> output_norm;  // [n_embd]
  TensorView output;               // [n_vocab x n_embd]; token_embd when tied
  bool tied_output = false;
  std::vector<LayerWeights> layers;
  uint64_t total_bytes = 0;  // bytes of all tensors in the file
  uint64_t n_params = 0;

  // Throws ModelError naming the missing tensor or the wrong shape.
  static ModelWeights from_gguf(const GgufFile& f, const ModelConfig& cfg);
};

}  // namespace kvscope
