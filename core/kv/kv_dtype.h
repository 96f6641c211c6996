#pragma once
// Element types of the KV cache and their exact byte cost (scales included), the one function
// every memory report uses.
#include <cstdint>
#include <optional>
#include <string>

namespace kvscope {

enum class KvDtype { F32, F16, BF16 };

const char* kv_dtype_name(KvDtype t);
std::optional<KvDtype> parse_kv_dtype(const std::string& s);  // "f32", "f16", "bf16"
// Bytes to store one head vector of head_dim elements (plus its scale for quantized types).
int64_t kv_bytes_per_head_vector(KvDtype t, int32_t head_dim);

}  // namespace kvscope
