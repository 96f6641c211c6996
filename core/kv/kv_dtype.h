#pragma once
// Element types of the KV cache and their exact byte cost (scales included), the one function
// every memory report uses.
#include <cstdint>
#include <optional>
#include <string>

namespace kvscope {

// INT8, FP8_E4M3 and FP8_E5M2 carry one f32 scale per (token, kv head) vector; see kv/kv_quant.h
// for why per token and for the exact FP8 definitions.
enum class KvDtype { F32, F16, BF16, INT8, FP8_E4M3, FP8_E5M2 };

inline constexpr KvDtype kAllKvDtypes[] = {KvDtype::F32,  KvDtype::F16,      KvDtype::BF16,
                                           KvDtype::INT8, KvDtype::FP8_E4M3, KvDtype::FP8_E5M2};

const char* kv_dtype_name(KvDtype t);  // "f32", "f16", "bf16", "int8", "fp8_e4m3", "fp8_e5m2"
// Accepts the names above and "fp8" (= fp8_e4m3, the usual choice for KV).
std::optional<KvDtype> parse_kv_dtype(const std::string& s);
const char* kv_dtype_choices();       // for error messages: "f32, f16, bf16, int8, fp8_e4m3 (fp8), fp8_e5m2"
int32_t kv_elem_bytes(KvDtype t);      // bytes of one element, scales excluded
bool kv_dtype_scaled(KvDtype t);       // one f32 scale per head vector
// Bytes to store one head vector of head_dim elements (plus its scale for quantized types).
int64_t kv_bytes_per_head_vector(KvDtype t, int32_t head_dim);

}  // namespace kvscope
