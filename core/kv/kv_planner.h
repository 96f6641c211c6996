#pragma once
// Capacity planning: weight and KV memory of a model at a context length, batch, weight
// precision and KV dtype, with a sliding window / sinks and a shared prefix, and the number of
// GPUs that holds it. Pure arithmetic on hyper-parameters; per-token KV bytes come from
// KvLayout::bytes_per_token, the function every other report uses (scales included).
//
// Units: every result is exact bytes. Reports show both GB (1e9) and GiB (2^30) because the
// problem statement's worked example mixes them: its 140 GB of FP16 weights for 70B parameters
// is decimal (70e9 x 2 B), while its 320 GB of FP16 KV at 128K context is 2.5 MiB/token x
// 131072 tokens = 320 GiB (343.6 GB).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_dtype.h"

namespace kvscope {

struct PlanModel {
  std::string name;
  double n_params = 0;  // parameters (weights at a chosen precision = n_params x bits / 8)
  int32_t n_layer = 0;
  int32_t n_head = 0;     // query heads
  int32_t n_head_kv = 0;  // key/value heads (grouped-query attention when < n_head)
  int32_t head_dim = 0;
  int32_t n_ctx_train = 0;
  int32_t sliding_window = 0;     // the model's own window, 0 if none
  int32_t n_swa_layers = 0;       // layers using it (Gemma 3 27B: 52 of 62; Mistral 7B v0.1: all)
  int64_t file_weight_bytes = 0;  // GGUF: tensor bytes as stored (used when no precision is given)
  std::string note;               // where the numbers come from
  // Mixture of experts: the experts live in the FFN, so they change the weights (all of them
  // resident) and the parameters one token reads, never the KV bytes per token.
  int32_t n_expert = 0;  // 0: dense
  int32_t n_expert_used = 0;
  double n_active_params = 0;  // per token; 0: same as n_params
  // Latent attention (DeepSeek's MLA, model_config.h MlaConfig): one row of head_dim =
  // kv_lora_rank + RoPE dims per token and layer, n_head_kv 1. mla_k_dim / mla_v_dim: a
  // decompressed head's key and value widths, what --mha counts instead.
  int32_t kv_lora_rank = 0;  // 0: not latent
  int32_t mla_k_dim = 0, mla_v_dim = 0;
  bool latent() const { return kv_lora_rank > 0; }
  // Gemma 4: the sliding layers' own KV heads and head size (0: as above), and the layers that
  // read an earlier layer's KV instead of storing their own (attention.shared_kv_layers).
  int32_t swa_n_head_kv = 0, swa_head_dim = 0;
  int32_t n_borrow_swa = 0, n_borrow_full = 0;
  // Hybrid recurrent models (Qwen3.5, Qwen3-Next, Granite 4.0-H, LFM2): n_recurrent_layers keep a
  // fixed state per sequence instead of KV (state_bytes_per_layer: the recurrent and convolution
  // state at the model's state dtype, whatever the length); only the other layers store KV.
  int32_t n_recurrent_layers = 0;
  int64_t state_bytes_per_layer = 0;
  bool hybrid() const { return n_recurrent_layers > 0; }
};

// Llama-2-70B, Llama-3-70B, Mistral-7B, Qwen2.5-7B, Gemma-3-27B, "70B" (the problem statement's
// model: Llama-70B shape with exactly 70e9 parameters), and the 2025 families: Qwen3-30B-A3B,
// Qwen3-235B-A22B, GLM-4.5, GLM-4.5-Air, GLM-4.7, Mistral-Small-3.2, Phi-4, SmolLM3-3B,
// gpt-oss-20b, gpt-oss-120b, and latent attention's DeepSeek-V3, DeepSeek-R1, Kimi-K2 (numbers
// and sources in docs/models.md).
const std::vector<PlanModel>& plan_presets();
std::optional<PlanModel> find_plan_preset(const std::string& name);  // case-insensitive

// Bits per weight of a precision name: f32 32, f16/bf16 16, fp8/int8 8, int4 4, and GGUF block
// formats with their scales (q8_0 8.5, q6_k 6.5625, q4_k 4.5, q4_0 4.5).
std::optional<double> weight_bits(const std::string& name);
const char* weight_choices();
// "131072", "128K"/"128k" (x1024), "1M" (x1048576). nullopt when malformed or not positive.
std::optional<int64_t> parse_token_count(const std::string& s);

struct PlanInput {
  PlanModel model;
  int64_t context = 0;  // tokens per sequence
  int32_t batch = 1;    // concurrent sequences at full context
  std::string weights;  // precision name; empty: model.file_weight_bytes
  KvDtype kv_dtype = KvDtype::F16;
  int32_t window = 0;  // 0: full attention (model's own window still applies)
  int32_t sinks = 0;
  int64_t shared_prefix = 0;  // first P tokens identical in every sequence, stored once
  bool mha = false;           // count every query head as a KV head (the statement's formula; MLA: decompressed)
  double gpu_gib = 80;
  double gpu_util = 1.0;  // usable fraction of each GPU's memory
};

// Layers that share a window: KV kept per sequence and for the whole batch.
struct PlanGroup {
  std::string kind;  // "full" or "window W"
  int32_t n_layer = 0;
  int32_t window = 0;
  int64_t tokens_per_seq = 0;  // positions kept per sequence at full context
  int64_t tokens_stored = 0;   // over the batch, shared-prefix positions counted once
  int64_t bytes = 0;
};

struct PlanResult {
  int32_t kv_heads = 0;            // n_head_kv, or n_head with mha
  int64_t kv_bytes_per_token = 0;  // all layers, one token, scales included
  int64_t kv_element_bytes_per_token = 0;
  std::string formula;  // "2 x 80 layers x 8 KV heads x (128 x 2 B) = 327680 B/token"
  int64_t weights_bytes = 0;
  int64_t kv_bytes = 0;
  int64_t kv_element_bytes = 0;  // kv_bytes without the int8/fp8 scales
  int64_t kv_scale_bytes = 0;
  int64_t total_bytes = 0;
  int32_t gpus = 0;  // ceil(total / usable bytes per GPU)
  std::vector<PlanGroup> groups;
  // Hybrid recurrent models: the fixed state of one sequence and of the batch (in total_bytes);
  // how many sequences of `context` tokens fit beside the weights on the fit_gpus GPUs the
  // weights need (at least one), for this model and
  // for the same model with attention (KV) in every layer; the length at which one sequence's
  // fixed state equals the KV those recurrent layers would hold as attention layers.
  int64_t state_bytes_per_seq = 0;
  int64_t state_bytes = 0;
  int64_t seqs_fit = 0, seqs_fit_full_attention = 0;
  int32_t fit_gpus = 0;
  int64_t break_even_tokens = 0;
};

// Throws std::invalid_argument on a bad input (unknown precision, context < 1, prefix > context...).
PlanResult plan_memory(const PlanInput& in);
// One token's KV bytes over all layers (scales included), as plan_memory counts them; throws
// std::invalid_argument for a KV dtype the model cannot use (packed dtypes on a latent cache).
int64_t plan_kv_bytes_per_token(const PlanModel& m, KvDtype kv);

}  // namespace kvscope
