#pragma once
// How many slots the contiguous baseline reserves for a request up front. Pre-paging systems
// differed here, and the choice decides which of the classic problems a run shows:
// - MaxModelLen: every request reserves max_model_len (FasterTransformer-style). Internal waste
//   is huge, but all reservations are the same size, so a freed one always fits the next
//   request: external fragmentation cannot block anyone.
// - Request: each request reserves its own worst case, min(prompt + max_new_tokens,
//   max_model_len), as Orca-style systems did when the client states max_tokens. Sizes differ,
//   so holes open between live reservations that a new request may not fit although the total
//   free space would.
// - Fixed: a fixed guess of N slots (at least the first chunk). A sequence that outgrows it
//   grows in place, is moved (its K/V copied) to a larger run, or is preempted.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvscope {

enum class BaselineReserveKind : uint8_t { MaxModelLen, Request, Fixed };

struct BaselineReserve {
  BaselineReserveKind kind = BaselineReserveKind::MaxModelLen;
  int32_t fixed_slots = 0;  // Fixed only: the guess N (> 0)
};

// "max-model-len", "request" or a positive integer N; nullopt for anything else.
std::optional<BaselineReserve> parse_baseline_reserve(std::string_view text);
std::string baseline_reserve_name(const BaselineReserve& r);  // the text parse accepts

}  // namespace kvscope
