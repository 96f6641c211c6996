#pragma once
// Element type of the recurrent state of hybrid models (lfm2, qwen35, granitehybrid), a setting
// apart from the KV dtype: vLLM keeps it apart too (mamba_ssm_cache_dtype), because quantizing
// the KV leaves a hybrid's fixed state (most of its memory at short lengths) as it was. f16 and
// bf16 round the state once per token, when the layer writes it back.
#include <optional>
#include <string>

namespace kvscope {

enum class StateDtype { F32, F16, BF16 };

inline constexpr StateDtype kAllStateDtypes[] = {StateDtype::F32, StateDtype::F16, StateDtype::BF16};

inline const char* state_dtype_name(StateDtype t) {
  return t == StateDtype::F16 ? "f16" : t == StateDtype::BF16 ? "bf16" : "f32";
}
inline std::optional<StateDtype> parse_state_dtype(const std::string& s) {
  for (StateDtype t : kAllStateDtypes)
    if (s == state_dtype_name(t)) return t;
  return std::nullopt;
}
inline const char* state_dtype_choices() { return "f32, f16, bf16"; }
inline int32_t state_elem_bytes(StateDtype t) { return t == StateDtype::F32 ? 4 : 2; }

}  // namespace kvscope
