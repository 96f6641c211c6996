#include "kv/kv_planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "kv/kv_layout.h"

namespace kvscope {

// long-function: one table of published model shapes, a row each
const std::vector<PlanModel>& plan_presets() {
  // Hyper-parameters from each model's published config.json.
  static const std::vector<PlanModel> presets = {
      {"70B", 70e9, 80, 64, 8, 128, 131072, 0, 0, 0,
       "the problem statement's 70B model: Llama-70B shape, exactly 70e9 parameters"},
      {"Llama-2-70B", 68.98e9, 80, 64, 8, 128, 4096, 0, 0, 0, "meta-llama/Llama-2-70b-hf"},
      {"Llama-3-70B", 70.55e9, 80, 64, 8, 128, 8192, 0, 0, 0, "meta-llama/Meta-Llama-3-70B (3.1: 131072 context)"},
      {"Mistral-7B", 7.24e9, 32, 32, 8, 128, 32768, 4096, 32, 0,
       "mistralai/Mistral-7B-v0.1: sliding window 4096 in every layer"},
      {"Qwen2.5-7B", 7.62e9, 28, 28, 4, 128, 131072, 0, 0, 0, "Qwen/Qwen2.5-7B (32768 native, 131072 with YaRN)"},
      {"Gemma-3-27B", 27.0e9, 62, 32, 16, 128, 131072, 1024, 52, 0,
       "google/gemma-3-27b: 5 local (window 1024) : 1 global layers, 52 local + 10 global"},
      // 2025 families. MoE rows: total parameters, then experts (used / present) and active ones.
      {"Qwen3-30B-A3B", 30.5e9, 48, 32, 4, 128, 40960, 0, 0, 0,
       "Qwen/Qwen3-30B-A3B: 128 experts, 8 per token, no shared expert", 128, 8, 3.3e9},
      {"Qwen3-235B-A22B", 235e9, 94, 64, 4, 128, 40960, 0, 0, 0, "Qwen/Qwen3-235B-A22B: 128 experts, 8 per token", 128,
       8, 22e9},
      {"GLM-4.5", 355e9, 92, 96, 8, 128, 131072, 0, 0, 0,
       "zai-org/GLM-4.5: 160 routed + 1 shared expert, 8 per token, first 3 layers dense", 160, 8, 32e9},
      {"GLM-4.5-Air", 106e9, 46, 96, 8, 128, 131072, 0, 0, 0,
       "zai-org/GLM-4.5-Air: 128 routed + 1 shared expert, 8 per token, first layer dense", 128, 8, 12e9},
      {"GLM-4.7", 355e9, 92, 96, 8, 128, 202752, 0, 0, 0, "zai-org/GLM-4.7: GLM-4.5's shape with a 200K context", 160,
       8, 32e9},
      {"Mistral-Small-3.2", 24.0e9, 40, 32, 8, 128, 131072, 0, 0, 0,
       "mistralai/Mistral-Small-3.2-24B-Instruct-2506 (text decoder)"},
      {"Phi-4", 14.7e9, 40, 40, 10, 128, 16384, 0, 0, 0, "microsoft/phi-4"},
      {"SmolLM3-3B", 3.08e9, 36, 16, 4, 128, 65536, 0, 0, 0,
       "HuggingFaceTB/SmolLM3-3B: no RoPE in every 4th layer (its KV is the same size)"},
      // gpt-oss: every other layer slides over 128 tokens; its learned sinks are weights (one
      // logit per head), not cached tokens, so they add nothing here.
      {"gpt-oss-20b", 20.9e9, 24, 64, 8, 64, 131072, 128, 12, 0,
       "openai/gpt-oss-20b: 32 experts, 4 per token; sliding (128) and full layers alternate", 32, 4, 3.6e9},
      {"gpt-oss-120b", 116.8e9, 36, 64, 8, 64, 131072, 128, 18, 0,
       "openai/gpt-oss-120b: 128 experts, 4 per token; sliding (128) and full layers alternate", 128, 4, 5.1e9},
      // Gemma 4: sliding layers of head 256, full layers of head 512 with fewer KV heads; the
      // E models' last layers read the KV of the last sliding / full layer before them.
      {"Gemma-4-31B", 30.7e9, 60, 32, 4, 512, 262144, 1024, 50, 0,
       "google/gemma-4-31B: 50 sliding (window 1024, 16 KV heads of 256) + 10 full (4 KV heads of 512), K = V in "
       "full layers (stored twice here, as llama.cpp does)",
       0, 0, 0, 0, 0, 0, 16, 256},
      {"Gemma-4-26B-A4B", 25.2e9, 30, 16, 2, 512, 262144, 1024, 25, 0,
       "google/gemma-4-26B-A4B: 25 sliding (window 1024, 8 KV heads of 256) + 5 full (2 KV heads of 512); 128 "
       "experts, 8 per token",
       128, 8, 3.8e9, 0, 0, 0, 8, 256},
      {"Gemma-4-E2B",
       5.1e9,
       35,
       8,
       1,
       512,
       131072,
       512,
       28,
       0,
       "google/gemma-4-E2B: 28 sliding (window 512, 1 KV head of 256) + 7 full (1 KV head of 512); layers 15-34 "
       "read the KV of layers 13 and 14",
       0,
       0,
       0,
       0,
       0,
       0,
       1,
       256,
       16,
       4},
      {"Gemma-4-E4B",
       8.0e9,
       42,
       8,
       2,
       512,
       131072,
       512,
       35,
       0,
       "google/gemma-4-E4B: 35 sliding (window 512, 2 KV heads of 256) + 7 full (2 KV heads of 512); layers 24-41 "
       "read the KV of layers 22 and 23",
       0,
       0,
       0,
       0,
       0,
       0,
       2,
       256,
       15,
       3},
      // Hybrids: recurrent layers keep a fixed state per sequence. Gated DeltaNet (Qwen3.5,
      // Qwen3-Next): 32 value heads x 128 x 128 f32 recurrent state + 3 x 8192 bf16 conv values
      // = 2,146,304 B per layer; Mamba-2 (Granite 4.0-H): 128 heads x 64 x 128 f32 + 3 x 8448
      // bf16 = 4,244,992 B; LFM2's short convolution: 2 x 2048 bf16 = 8,192 B.
      {"Qwen3.5-9B",
       9e9,
       32,
       16,
       4,
       256,
       262144,
       0,
       0,
       0,
       "Qwen/Qwen3.5-9B: Gated DeltaNet in 3 of every 4 layers (full_attention_interval 4), f32 state",
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       24,
       2146304},
      {"Qwen3.5-35B-A3B",
       35e9,
       40,
       16,
       2,
       256,
       262144,
       0,
       0,
       0,
       "Qwen/Qwen3.5-35B-A3B: 30 Gated DeltaNet + 10 full layers, 256 experts, 8 per token",
       256,
       8,
       3e9,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       30,
       2146304},
      {"Qwen3-Next-80B-A3B",
       79.7e9,
       48,
       16,
       2,
       256,
       262144,
       0,
       0,
       0,
       "Qwen/Qwen3-Next-80B-A3B: 36 Gated DeltaNet + 12 full layers, 512 experts, 10 per token; f32 state "
       "assumed (as Qwen3.5's mamba_ssm_dtype)",
       512,
       10,
       3.9e9,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       36,
       2146304},
      {"Granite-4.0-H-Small",
       32e9,
       40,
       32,
       8,
       128,
       131072,
       0,
       0,
       0,
       "ibm-granite/granite-4.0-h-small: 36 Mamba-2 + 4 attention layers (mamba_n_heads 128, d_head 64, "
       "d_state 128, n_groups 1, d_conv 4), f32 state assumed; 9B of 32B active",
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       36,
       4244992},
      {"LFM2-1.2B",
       1.17e9,
       16,
       32,
       8,
       64,
       32768,
       0,
       0,
       0,
       "LiquidAI/LFM2-1.2B: 10 short-convolution (L_cache 3) + 6 attention layers",
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       0,
       10,
       8192},
      // Latent attention: 61 layers x (512 latent + 64 RoPE key), one row per token, where
      // the equivalent multi-head cache would hold 128 heads x (192 key + 128 value).
      {"DeepSeek-V3", 671e9, 61, 128, 1, 576, 163840, 0, 0, 0,
       "deepseek-ai/DeepSeek-V3: MLA (kv_lora_rank 512, RoPE key 64, heads 192/128 decompressed), 256 routed + 1 "
       "shared expert, 8 per token, first 3 layers dense",
       256, 8, 37e9, 512, 192, 128},
      {"DeepSeek-R1", 671e9, 61, 128, 1, 576, 163840, 0, 0, 0, "deepseek-ai/DeepSeek-R1: DeepSeek-V3's shape", 256, 8,
       37e9, 512, 192, 128},
      {"Kimi-K2", 1.04e12, 61, 64, 1, 576, 131072, 0, 0, 0,
       "moonshotai/Kimi-K2-Instruct: DeepSeek-V3's MLA with 64 heads, 384 routed + 1 shared expert, 8 per token, "
       "first layer dense",
       384, 8, 32.6e9, 512, 192, 128},
  };
  return presets;
}

static std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<PlanModel> find_plan_preset(const std::string& name) {
  for (const PlanModel& m : plan_presets())
    if (lower(m.name) == lower(name)) return m;
  return std::nullopt;
}

std::optional<double> weight_bits(const std::string& name) {
  static const std::pair<const char*, double> table[] = {
      {"f32", 32},
      {"f16", 16},
      {"bf16", 16},
      {"fp8", 8},
      {"int8", 8},
      {"int4", 4},
      // GGUF blocks carry their scales: q8_0 = 32 x 8 bit + f16 scale per 32; q4_0 = 32 x 4 bit +
      // f16 scale; q4_k / q6_k = 256-element super-blocks (144 and 210 bytes).
      {"q8_0", 8.5},
      {"q6_k", 6.5625},
      {"q4_k", 4.5},
      {"q4_0", 4.5}};
  for (const auto& [n, b] : table)
    if (lower(name) == n) return b;
  return std::nullopt;
}

const char* weight_choices() { return "f32, f16, bf16, fp8, int8, int4, q8_0, q6_k, q4_k, q4_0"; }

std::optional<int64_t> parse_token_count(const std::string& s) {
  if (s.empty()) return std::nullopt;
  int64_t mult = 1;
  std::string digits = s;
  const char last = static_cast<char>(std::tolower(static_cast<unsigned char>(s.back())));
  if (last == 'k') mult = 1024;
  if (last == 'm') mult = 1024 * 1024;
  if (mult != 1) digits.pop_back();
  if (digits.empty() || digits.size() > 12) return std::nullopt;
  for (char c : digits)
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  const int64_t v = std::stoll(digits) * mult;
  return v > 0 ? std::optional<int64_t>(v) : std::nullopt;
}

// Positions a sequence of length ctx keeps under (window, sinks) — [0, min(S, lo)) and
// [lo, ctx) with lo = ctx - W, as the engine's attention sees them — split into those inside
// the shared prefix [0, P) and the rest.
static std::pair<int64_t, int64_t> kept_positions(int64_t ctx, int32_t window, int32_t sinks, int64_t prefix) {
  const int64_t lo = window > 0 ? std::max<int64_t>(0, ctx - window) : 0;
  const int64_t n_sink = window > 0 ? std::min<int64_t>(sinks, lo) : 0;
  auto overlap = [](int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
    return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
  };
  const int64_t shared = overlap(0, n_sink, 0, prefix) + overlap(lo, ctx, 0, prefix);
  const int64_t total = n_sink + (ctx - lo);
  return {shared, total - shared};
}

// Layers of each kind that store KV: the model's own sliding layers (when it has a window) and
// the full ones, less those that borrow an earlier layer's KV.
static std::pair<int32_t, int32_t> stored_layers(const PlanModel& m) {
  const int32_t n_swa = m.sliding_window > 0 ? std::min(m.n_swa_layers, m.n_layer) : 0;
  return {std::max(0, m.n_layer - n_swa - m.n_borrow_full - m.n_recurrent_layers), std::max(0, n_swa - m.n_borrow_swa)};
}

// A sliding layer's KV bytes per token (scales included, and codes only) where its shape is its
// own (Gemma 4); {0, 0} when it is the full layers'.
static std::pair<int64_t, int64_t> sliding_layer_bytes(const PlanInput& in) {
  const PlanModel& m = in.model;
  if (m.swa_head_dim <= 0 && m.swa_n_head_kv <= 0) return {0, 0};
  KvLayout l;
  l.n_layer = 1;
  l.n_head_kv = in.mha ? m.n_head : (m.swa_n_head_kv > 0 ? m.swa_n_head_kv : m.n_head_kv);
  l.head_dim = m.swa_head_dim > 0 ? m.swa_head_dim : m.head_dim;
  l.dtype = in.kv_dtype;
  return {l.bytes_per_token(), 2LL * l.n_head_kv * l.head_dim * kv_code_bits(in.kv_dtype) / 8};
}

// One full layer's KV bytes per token (scales included, and codes only), and the formula of the
// whole model's: into r.kv_heads, kv_bytes_per_token, kv_element_bytes_per_token, formula.
static std::pair<int64_t, int64_t> kv_per_token(const PlanInput& in, PlanResult& r) {
  const PlanModel& m = in.model;
  if (m.latent() && kv_dtype_packed(in.kv_dtype))
    throw std::invalid_argument("plan: " + latent_packed_problem(in.kv_dtype));
  r.kv_heads = in.mha ? m.n_head : m.n_head_kv;
  KvLayout per_layer;  // one layer: bytes_per_token is the function the engine reports with
  per_layer.n_layer = 1;
  per_layer.n_head_kv = r.kv_heads;
  per_layer.head_dim = m.head_dim;
  per_layer.dtype = in.kv_dtype;
  per_layer.latent = m.latent() && !in.mha;
  int64_t layer_token_bytes = per_layer.bytes_per_token();
  int64_t layer_elem_bytes =
      (per_layer.latent ? 1LL : 2LL) * r.kv_heads * m.head_dim * kv_code_bits(in.kv_dtype) / 8;  // codes only
  if (m.latent() && in.mha) {  // every head's decompressed key and value, as a multi-head model would cache them
    layer_token_bytes = static_cast<int64_t>(m.n_head) * (kv_bytes_per_head_vector(in.kv_dtype, m.mla_k_dim) +
                                                          kv_bytes_per_head_vector(in.kv_dtype, m.mla_v_dim));
    layer_elem_bytes = static_cast<int64_t>(m.n_head) * (m.mla_k_dim + m.mla_v_dim) * kv_elem_bytes(in.kv_dtype);
  }
  r.kv_bytes_per_token = layer_token_bytes * m.n_layer;
  r.kv_element_bytes_per_token = layer_elem_bytes * m.n_layer;
  const std::pair<int64_t, int64_t> swa = sliding_layer_bytes(in);
  if (m.hybrid()) {  // recurrent layers: a fixed state per sequence, no KV
    const int32_t n_attn = stored_layers(m).first;
    r.kv_bytes_per_token = layer_token_bytes * n_attn;
    r.kv_element_bytes_per_token = layer_elem_bytes * n_attn;
    r.formula = std::to_string(n_attn) + " attention layers x " + std::to_string(layer_token_bytes) +
                " B = " + std::to_string(r.kv_bytes_per_token) + " B/token; plus " +
                std::to_string(m.n_recurrent_layers) + " recurrent layers x " +
                std::to_string(m.state_bytes_per_layer) + " B of state per sequence, whatever its length";
    return {layer_token_bytes, layer_elem_bytes};
  }
  if (swa.first > 0 || m.n_borrow_swa + m.n_borrow_full > 0) {  // Gemma 4: per kind, stored layers only
    const std::pair<int32_t, int32_t> n = stored_layers(m);
    const int64_t swa_token = swa.first > 0 ? swa.first : layer_token_bytes;
    r.kv_bytes_per_token = layer_token_bytes * n.first + swa_token * n.second;
    r.kv_element_bytes_per_token =
        layer_elem_bytes * n.first + (swa.first > 0 ? swa.second : layer_elem_bytes) * n.second;
    r.formula = std::to_string(n.first) + " full layers x " + std::to_string(layer_token_bytes) + " B + " +
                std::to_string(n.second) + " sliding layers x " + std::to_string(swa_token) +
                " B = " + std::to_string(r.kv_bytes_per_token) + " B/token (" +
                std::to_string(m.n_borrow_full + m.n_borrow_swa) + " layers read an earlier layer's KV and store none)";
    return {layer_token_bytes, layer_elem_bytes};
  }
  const std::string scale = kv_dtype_scaled(in.kv_dtype) ? " + 4 B scale" : "";
  const std::string elem = " x " + std::to_string(kv_elem_bytes(in.kv_dtype)) + " B";
  if (per_layer.latent)
    r.formula = std::to_string(m.n_layer) + " layers x 1 latent row x ((" + std::to_string(m.kv_lora_rank) +
                " latent + " + std::to_string(m.head_dim - m.kv_lora_rank) + " RoPE key)" + elem + scale +
                ") = " + std::to_string(r.kv_bytes_per_token) + " B/token (the row is key and value at once)";
  else if (m.latent())
    r.formula = std::to_string(m.n_layer) + " layers x " + std::to_string(m.n_head) + " heads x ((" +
                std::to_string(m.mla_k_dim) + " key + " + std::to_string(m.mla_v_dim) + " value)" + elem +
                (scale.empty() ? "" : " + 2 x 4 B scales") + ") = " + std::to_string(r.kv_bytes_per_token) +
                " B/token (decompressed multi-head)";
  else if (kv_dtype_packed(
               in.kv_dtype))  // codes + f16 scales/mins (+ KIVI's per-block key parameters), 16-token blocks
    r.formula = std::to_string(m.n_layer) + " layers x " + std::to_string(r.kv_heads) + " KV heads x " +
                std::to_string(kv_bytes_per_token_head(in.kv_dtype, m.head_dim, per_layer.block_size, 0)) +
                " B (K+V: " + std::to_string(m.head_dim) + " x " + std::to_string(kv_code_bits(in.kv_dtype)) +
                "-bit codes x 2 + f16 scales) = " + std::to_string(r.kv_bytes_per_token) + " B/token";
  else
    r.formula = "2 (K,V) x " + std::to_string(m.n_layer) + " layers x " + std::to_string(r.kv_heads) + " KV heads x (" +
                std::to_string(m.head_dim) + " x " + std::to_string(kv_elem_bytes(in.kv_dtype)) + " B" +
                (kv_dtype_scaled(in.kv_dtype) ? " + 4 B scale" : "") + ") = " + std::to_string(r.kv_bytes_per_token) +
                " B/token";

  return {layer_token_bytes, layer_elem_bytes};
}

int64_t plan_kv_bytes_per_token(const PlanModel& m, KvDtype kv) {
  PlanInput in;
  in.model = m;
  in.kv_dtype = kv;
  PlanResult r;
  kv_per_token(in, r);
  return r.kv_bytes_per_token;
}

// A hybrid recurrent model's fixed state (into total_bytes), and what fits in one GPU beside the
// weights (on the GPUs the weights need) at this context: sequences of this model, and of the same model with every layer an
// attention layer of the same shape (the comparison a user picking between them makes).
static void plan_recurrent_state(const PlanInput& in, int64_t layer_token_bytes, double usable, PlanResult& r) {
  const PlanModel& m = in.model;
  r.state_bytes_per_seq = m.state_bytes_per_layer * m.n_recurrent_layers;
  r.state_bytes = r.state_bytes_per_seq * in.batch;
  r.total_bytes += r.state_bytes;
  // The GPUs the weights alone need, at least one, hold the weights and as many sequences as fit.
  r.fit_gpus = std::max(1, static_cast<int32_t>(std::ceil(static_cast<double>(r.weights_bytes) / usable)));
  const double room = usable * r.fit_gpus - static_cast<double>(r.weights_bytes);
  const double per_seq =
      static_cast<double>(r.state_bytes_per_seq) + static_cast<double>(r.kv_bytes_per_token) * in.context;
  const double per_seq_full = static_cast<double>(layer_token_bytes) * m.n_layer * in.context;
  r.seqs_fit = room > 0 ? static_cast<int64_t>(room / per_seq) : 0;
  r.seqs_fit_full_attention = room > 0 ? static_cast<int64_t>(room / per_seq_full) : 0;
  const int64_t recurrent_as_kv = layer_token_bytes * m.n_recurrent_layers;  // per token
  r.break_even_tokens = recurrent_as_kv > 0 ? (r.state_bytes_per_seq + recurrent_as_kv - 1) / recurrent_as_kv : 0;
}

PlanResult plan_memory(const PlanInput& in) {
  const PlanModel& m = in.model;
  if (m.n_layer <= 0 || m.n_head <= 0 || m.n_head_kv <= 0 || m.head_dim <= 0)
    throw std::invalid_argument("plan: the model needs layers, heads, KV heads and head_dim");
  if (in.context < 1) throw std::invalid_argument("plan: context must be at least 1 token");
  if (in.batch < 1) throw std::invalid_argument("plan: batch must be at least 1");
  if (in.window < 0 || in.sinks < 0) throw std::invalid_argument("plan: window and sinks must not be negative");
  if (in.sinks > 0 && in.window == 0) throw std::invalid_argument("plan: sinks need a window");
  if (in.shared_prefix < 0 || in.shared_prefix > in.context)
    throw std::invalid_argument("plan: the shared prefix must be between 0 and the context");
  if (!(in.gpu_gib > 0) || !(in.gpu_util > 0 && in.gpu_util <= 1))
    throw std::invalid_argument("plan: GPU memory must be positive and the usable fraction in (0, 1]");

  PlanResult r;
  if (in.weights.empty()) {
    if (m.file_weight_bytes <= 0) throw std::invalid_argument("plan: name a weight precision (--weights)");
    r.weights_bytes = m.file_weight_bytes;
  } else {
    const auto bits = weight_bits(in.weights);
    if (!bits)
      throw std::invalid_argument("plan: unknown weight precision '" + in.weights + "' (" + weight_choices() + ")");
    r.weights_bytes = static_cast<int64_t>(std::llround(m.n_params * *bits / 8.0));
  }

  // Plain variables, not a structured binding: clang 14 (the fuzz build) cannot capture those.
  const std::pair<int64_t, int64_t> per_token = kv_per_token(in, r);
  const int64_t layer_token_bytes = per_token.first, layer_elem_bytes = per_token.second;

  // Layer groups: the model's own sliding layers (window narrowed by --window) and the rest.
  const std::pair<int64_t, int64_t> swa_bytes = sliding_layer_bytes(in);
  auto add_group = [&](int32_t n_layer, int32_t window, bool sliding) {
    if (n_layer <= 0) return;
    const bool own = sliding && swa_bytes.first > 0;  // Gemma 4's sliding layers: their own shape
    const int64_t token_bytes = own ? swa_bytes.first : layer_token_bytes;
    const int64_t elem_bytes = own ? swa_bytes.second : layer_elem_bytes;
    PlanGroup g;
    g.n_layer = n_layer;
    g.window = window;
    g.kind = window > 0 ? "window " + std::to_string(window) : "full";
    const auto [shared, priv] = kept_positions(in.context, window, in.sinks, in.shared_prefix);
    g.tokens_per_seq = shared + priv;
    g.tokens_stored = shared + static_cast<int64_t>(in.batch) * priv;
    g.bytes = g.tokens_stored * token_bytes * n_layer;
    r.kv_element_bytes += g.tokens_stored * elem_bytes * n_layer;
    r.kv_bytes += g.bytes;
    r.groups.push_back(g);
  };
  const std::pair<int32_t, int32_t> stored = stored_layers(m);
  const int32_t swa_window = in.window > 0 ? std::min(in.window, m.sliding_window) : m.sliding_window;
  add_group(stored.first, in.window, false);
  add_group(stored.second, swa_window, true);
  r.kv_scale_bytes = r.kv_bytes - r.kv_element_bytes;
  r.total_bytes = r.weights_bytes + r.kv_bytes;
  const double usable = in.gpu_gib * in.gpu_util * static_cast<double>(1LL << 30);
  if (m.hybrid()) plan_recurrent_state(in, layer_token_bytes, usable, r);
  r.gpus = static_cast<int32_t>(std::ceil(static_cast<double>(r.total_bytes) / usable));
  return r;
}

}  // namespace kvscope
