#include "kv/baseline_reserve.h"

#include <charconv>

namespace kvscope {

std::optional<BaselineReserve> parse_baseline_reserve(std::string_view text) {
  if (text == "max-model-len") return BaselineReserve{BaselineReserveKind::MaxModelLen, 0};
  if (text == "request") return BaselineReserve{BaselineReserveKind::Request, 0};
  int32_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n <= 0) return std::nullopt;
  return BaselineReserve{BaselineReserveKind::Fixed, n};
}

std::string baseline_reserve_name(const BaselineReserve& r) {
  switch (r.kind) {
    case BaselineReserveKind::MaxModelLen:
      return "max-model-len";
    case BaselineReserveKind::Request:
      return "request";
    case BaselineReserveKind::Fixed:
      return std::to_string(r.fixed_slots);
  }
  return "?";
}

}  // namespace kvscope
