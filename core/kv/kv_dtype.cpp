#include "kv/kv_dtype.h"

namespace kvscope {

const char* kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::F32:
      return "f32";
    case KvDtype::F16:
      return "f16";
    case KvDtype::BF16:
      return "bf16";
    case KvDtype::INT8:
      return "int8";
    case KvDtype::FP8_E4M3:
      return "fp8_e4m3";
    case KvDtype::FP8_E5M2:
      return "fp8_e5m2";
    case KvDtype::INT4:
      return "int4";
    case KvDtype::KIVI4:
      return "kivi4";
    case KvDtype::KIVI2:
      return "kivi2";
    case KvDtype::ROT4:
      return "rot4";
    case KvDtype::ROT4C:
      return "rot4c";
  }
  return "?";
}

std::optional<KvDtype> parse_kv_dtype(const std::string& s) {
  for (KvDtype t : kAllKvDtypes)
    if (s == kv_dtype_name(t)) return t;
  if (s == "fp8") return KvDtype::FP8_E4M3;
  return std::nullopt;
}

const char* kv_dtype_choices() {
  return "f32, f16, bf16, int8, fp8_e4m3 (alias fp8), fp8_e5m2, int4, kivi4, kivi2, rot4, rot4c";
}

int32_t kv_code_bits(KvDtype t) {
  switch (t) {
    case KvDtype::F32:
      return 32;
    case KvDtype::F16:
    case KvDtype::BF16:
      return 16;
    case KvDtype::INT8:
    case KvDtype::FP8_E4M3:
    case KvDtype::FP8_E5M2:
      return 8;
    case KvDtype::INT4:
    case KvDtype::KIVI4:
    case KvDtype::ROT4:
    case KvDtype::ROT4C:
      return 4;
    case KvDtype::KIVI2:
      return 2;
  }
  return 0;
}

int32_t kv_elem_bytes(KvDtype t) { return kv_code_bits(t) >= 8 ? kv_code_bits(t) / 8 : 1; }

bool kv_dtype_scaled(KvDtype t) { return t == KvDtype::INT8 || t == KvDtype::FP8_E4M3 || t == KvDtype::FP8_E5M2; }
bool kv_dtype_packed(KvDtype t) { return kv_code_bits(t) < 8; }
bool kv_dtype_kivi(KvDtype t) { return t == KvDtype::KIVI4 || t == KvDtype::KIVI2; }
bool kv_dtype_block_quantized(KvDtype t) { return kv_dtype_kivi(t) || t == KvDtype::ROT4C; }
bool kv_dtype_rotated(KvDtype t) { return t == KvDtype::ROT4 || t == KvDtype::ROT4C; }

int32_t kv_effective_group(int32_t group, int32_t head_dim) {
  const int32_t g = group > 0 ? group : kDefaultKvGroup;
  return g < head_dim ? g : head_dim;
}

std::string kv_format_problem(KvDtype t, int32_t head_dim, int32_t block_size, int32_t group) {
  if (!kv_dtype_packed(t)) return {};
  if (group < 0) return "the KV quantization group must be >= 0 (0: default " + std::to_string(kDefaultKvGroup) + ")";
  const int32_t g = kv_effective_group(group, head_dim);
  if (head_dim % g != 0)
    return "the KV quantization group " + std::to_string(g) + " does not divide head_dim " + std::to_string(head_dim);
  if ((static_cast<int64_t>(head_dim) * kv_code_bits(t)) % 8 != 0)
    return std::string(kv_dtype_name(t)) + " needs head_dim * bits to be a whole number of bytes";
  if (kv_dtype_rotated(t) && (head_dim & (head_dim - 1)) != 0)
    return std::string(kv_dtype_name(t)) + " needs a power-of-two head_dim (Walsh-Hadamard rotation), this model has " +
           std::to_string(head_dim);
  if (block_size < 2 && kv_dtype_block_quantized(t))
    return std::string(kv_dtype_name(t)) + " needs blocks of at least 2 tokens (it quantizes whole blocks)";
  if (head_dim > 512) return std::string(kv_dtype_name(t)) + " supports head_dim up to 512";
  return {};
}

std::string latent_packed_problem(KvDtype t) {
  return std::string(kv_dtype_name(t)) +
         " cannot hold a latent KV cache (DeepSeek's MLA): its keys and values are quantized differently (keys "
         "per channel over a block, values per token, or rotated), and a latent row is the key and the value at "
         "once. Use f32, f16, bf16, int8, fp8_e4m3 or fp8_e5m2";
}

int64_t kv_row_bytes(KvDtype t, bool is_value, int32_t head_dim, int32_t group) {
  const int64_t codes = static_cast<int64_t>(head_dim) * kv_code_bits(t) / 8;
  if (!kv_dtype_packed(t)) return codes;
  const int64_t groups = head_dim / kv_effective_group(group, head_dim);
  if (t == KvDtype::INT4 || kv_dtype_rotated(t)) return codes + 2 * groups;  // f16 scale per group
  return is_value ? codes + 4 * groups : codes;  // KIVI values: f16 scale + f16 min per group
}

int64_t kv_tile_extra_bytes(KvDtype t, bool is_value, int32_t head_dim, int32_t block_size) {
  if (!kv_dtype_block_quantized(t) || is_value) return 0;
  const int64_t params =
      (kv_dtype_kivi(t) ? 4LL : 2LL) * head_dim;  // KIVI: f16 scale + min per channel; rot4c: f16 center
  return (params + block_size - 1) / block_size * block_size;
}

int64_t kv_bytes_per_token_head(KvDtype t, int32_t head_dim, int32_t block_size, int32_t group) {
  if (!kv_dtype_packed(t)) return 2 * kv_bytes_per_head_vector(t, head_dim);
  int64_t tile = 0;
  for (bool v : {false, true})
    tile += block_size * kv_row_bytes(t, v, head_dim, group) + kv_tile_extra_bytes(t, v, head_dim, block_size);
  return tile / block_size;  // exact: the extra is padded to a multiple of block_size
}

int64_t kv_residual_bytes_per_block_head(KvDtype t, int32_t head_dim, int32_t block_size) {
  return kv_dtype_block_quantized(t) ? 2LL * block_size * head_dim * 2 : 0;
}

int64_t kv_bytes_per_head_vector(KvDtype t, int32_t head_dim) {
  if (kv_dtype_packed(t)) return (kv_bytes_per_token_head(t, head_dim, 16, kDefaultKvGroup) + 1) / 2;
  return static_cast<int64_t>(kv_elem_bytes(t)) * head_dim + (kv_dtype_scaled(t) ? 4 : 0);
}

}  // namespace kvscope
