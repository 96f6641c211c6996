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
enum class FfnActivation { Silu, GeluTanh };

struct ArchTraits {
  RopeStyle rope = RopeStyle::Normal;
  FfnActivation act = FfnActivation::Silu;
  bool qkv_bias = false;         // qwen2
  bool qk_norm = false;          // qwen3, gemma3: per-head RMSNorm of q and k before RoPE
  bool post_norms = false;       // gemma3: post_attention_norm and post_ffw_norm
  bool embed_scale = false;      // gemma3: embeddings * sqrt(n_embd)
  bool interleaved_swa = false;  // gemma3: sliding-window and global layers
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
  float rope_freq_scale = 1.0f;          // 1 / linear scaling factor
  std::vector<float> rope_freq_factors;  // llama 3.1+ rope_freqs.weight: pair i's angle / factor[i]; empty: none
  const float* rope_factors() const { return rope_freq_factors.empty() ? nullptr : rope_freq_factors.data(); }
  int32_t rope_dim = 0;        // rope.dimension_count (<= head_dim)
  int32_t sliding_window = 0;  // model's own window (gemma3), 0 if none
  int32_t swa_pattern = 0;     // gemma3: layer il is SWA iff il % pattern < pattern - 1
  float attn_scale = 0.0f;     // multiplier of q.k; 1/sqrt(head_dim) by default

  bool layer_is_swa(int32_t il) const {
    return traits.interleaved_swa && swa_pattern > 0 && (il % swa_pattern) < swa_pattern - 1;
  }
  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  // Keys and values of one token over all layers, in elements (x bytes/elem for the KV dtype).
  int64_t kv_elements_per_token() const { return 2LL * n_layer * n_head_kv * head_dim; }

  // Throws ModelError naming the missing or inconsistent key (unknown arch, 0 layers, heads
  // that do not divide, ...).
  static ModelConfig from_gguf(const GgufFile& f);
};

// Architectures kvscope runs.
const std::vector<std::string>& supported_architectures();

}  // namespace kvscope
