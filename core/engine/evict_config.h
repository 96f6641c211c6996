#pragma once
// Token eviction as an engine setting (`--evict h2o:BUDGET` / `snapkv:BUDGET`): which policy,
// how many tokens a sequence keeps, and when compaction moves survivors together. The policies
// themselves are in engine/token_eviction.h; the hole books in kv/token_holes.h.
#include <cstdint>
#include <string>

namespace kvscope {

enum class EvictPolicy : uint8_t { None, H2O, SnapKV };
const char* evict_policy_name(EvictPolicy p);  // "off", "h2o", "snapkv"

// Who chooses. Sequence: one choice per sequence from the weights summed over every layer and
// query head, so an evicted token is gone for every layer and its slot is free at once.
// Layer: every layer keeps its own BUDGET tokens by its own weights (the H2O paper chooses per
// layer and head); a layer's dropped tokens are hidden from that layer only, and a slot is
// freed once no layer can read it any more, so memory is the union of the layers' choices.
enum class EvictScope : uint8_t { Sequence, Layer };

struct EvictConfig {
  EvictPolicy policy = EvictPolicy::None;
  int32_t budget = 0;     // tokens a sequence keeps (when budget_pct is 0)
  double budget_pct = 0;  // > 0: the budget is this share (%) of the request's prompt, at least 1 token
  // H2O: the most recent tokens, always kept (-1: half the budget, the paper's even split between
  // heavy hitters and recent tokens). SnapKV: the observation window at the end of the prompt
  // whose attention chooses (-1: 32, the paper's), kept as well.
  int32_t recent = -1;
  // Compaction: when a sequence's holes exceed this share of the slots its blocks hold (and at
  // least one block's worth), its survivors are moved together. 1: never.
  double compact_at = 0.25;
  // SnapKV: select when this many tokens of the prompt are computed (0: the whole prompt).
  // `eval` sets it to score a text's continuation against a compressed beginning.
  int32_t select_at = 0;
  EvictScope scope = EvictScope::Sequence;
  bool per_layer() const { return scope == EvictScope::Layer; }
  bool on() const { return policy != EvictPolicy::None; }
  // The budget of a request with this prompt length.
  int32_t budget_for(int32_t prompt_len) const;
  // The recent (H2O) or observation (SnapKV) window for that budget.
  int32_t recent_for(int32_t budget) const;
};

// "h2o:512", "h2o:20%", "snapkv:10%", with an optional third field for the recent /
// observation window ("h2o:512:64") and an optional last field for the scope ("h2o:20%:layer",
// "h2o:512:64:layer"; "seq" is the default); "off" or "" for none. Throws std::invalid_argument with a
// message naming the bad part.
EvictConfig parse_evict(const std::string& spec);
std::string describe_evict(const EvictConfig& e);  // "h2o:20%" style ("h2o:20%:layer"), "off"

}  // namespace kvscope
