#include "kv/kv_dtype.h"

namespace kvscope {

const char* kv_dtype_name(KvDtype t) {
  switch (t) {
    case KvDtype::F32: return "f32";
    case KvDtype::F16: return "f16";
    case KvDtype::BF16: return "bf16";
  }
  return "?";
}

std::optional<KvDtype> parse_kv_dtype(const std::string& s) {
  if (s == "f32") return KvDtype::F32;
  if (s == "f16") return KvDtype::F16;
  if (s == "bf16") return KvDtype::BF16;
  return std::nullopt;
}

int64_t kv_bytes_per_head_vector(KvDtype t, int32_t head_dim) {
  switch (t) {
    case KvDtype::F32: return 4LL * head_dim;
    case KvDtype::F16:
    case KvDtype::BF16: return 2LL * head_dim;
  }
  return 0;
}

}  // namespace kvscope
