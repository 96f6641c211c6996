#include "kv/kv_dtype.h"

namespace kvscope {

const char* kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::F32: return "f32";
    case KvDtype::F16: return "f16";
    case KvDtype::BF16: return "bf16";
    case KvDtype::INT8: return "int8";
    case KvDtype::FP8_E4M3: return "fp8_e4m3";
    case KvDtype::FP8_E5M2: return "fp8_e5m2";
  }
  return "?";
}

std::optional<KvDtype> parse_kv_dtype(const std::string& s) {
  for (KvDtype t : kAllKvDtypes)
    if (s == kv_dtype_name(t)) return t;
  if (s == "fp8") return KvDtype::FP8_E4M3;
  return std::nullopt;
}

const char* kv_dtype_choices() { return "f32, f16, bf16, int8, fp8_e4m3 (alias fp8), fp8_e5m2"; }

int32_t kv_elem_bytes(KvDtype t) {
  switch (t) {
    case KvDtype::F32: return 4;
    case KvDtype::F16:
    case KvDtype::BF16: return 2;
    case KvDtype::INT8:
    case KvDtype::FP8_E4M3:
    case KvDtype::FP8_E5M2: return 1;
  }
  return 0;
}

bool kv_dtype_scaled(KvDtype t) {
  return t == KvDtype::INT8 || t == KvDtype::FP8_E4M3 || t == KvDtype::FP8_E5M2;
}

int64_t kv_bytes_per_head_vector(KvDtype t, int32_t head_dim) {
  return static_cast<int64_t>(kv_elem_bytes(t)) * head_dim + (kv_dtype_scaled(t) ? 4 : 0);
}

}  // namespace kvscope
