#include "engine/evict_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace kvscope {

const char* evict_policy_name(EvictPolicy p) {
  switch (p) {
    case EvictPolicy::H2O:
      return "h2o";
    case EvictPolicy::SnapKV:
      return "snapkv";
    default:
      return "off";
  }
}

int32_t EvictConfig::budget_for(int32_t prompt_len) const {
  if (budget_pct <= 0) return budget;
  return std::max<int32_t>(1, static_cast<int32_t>(std::lround(budget_pct / 100.0 * prompt_len)));
}

int32_t EvictConfig::recent_for(int32_t b) const {
  if (recent >= 0) return std::min(recent, std::max(0, b - 1));
  return policy == EvictPolicy::SnapKV ? std::min(32, std::max(0, b - 1)) : b / 2;
}

namespace {
[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw std::invalid_argument("--evict '" + spec + "': " + why +
                              " (e.g. h2o:512, h2o:20%, snapkv:10%, h2o:512:64, h2o:20%:layer, off)");
}

int32_t parse_int(const std::string& spec, const std::string& s, const char* what) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(s, &used);
  } catch (const std::exception&) { bad(spec, std::string(what) + " '" + s + "' is not a number"); }
  if (used != s.size() || v < 0 || v > (1L << 30))
    bad(spec, std::string(what) + " '" + s + "' is not a whole number >= 0");
  return static_cast<int32_t>(v);
}
}  // namespace

EvictConfig parse_evict(const std::string& full) {
  EvictConfig e;
  if (full.empty() || full == "off" || full == "none") return e;
  // The scope is a trailing word, so "h2o:512:layer" and "h2o:512:64:layer" both read.
  std::string spec = full;
  const size_t last = spec.rfind(':');
  if (last != std::string::npos) {
    const std::string word = spec.substr(last + 1);
    if (word == "layer" || word == "seq") {
      e.scope = word == "layer" ? EvictScope::Layer : EvictScope::Sequence;
      spec.resize(last);
      if (spec.find(':') == std::string::npos) bad(full, "a budget is needed after the policy");
    }
  }
  const size_t c1 = spec.find(':');
  if (c1 == std::string::npos) bad(full, "a budget is needed after the policy");
  const std::string name = spec.substr(0, c1);
  if (name == "h2o")
    e.policy = EvictPolicy::H2O;
  else if (name == "snapkv")
    e.policy = EvictPolicy::SnapKV;
  else
    bad(full, "unknown policy '" + name + "' (h2o or snapkv)");
  const size_t c2 = spec.find(':', c1 + 1);
  std::string budget = spec.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
  if (c2 != std::string::npos) e.recent = parse_int(full, spec.substr(c2 + 1), "window");
  if (!budget.empty() && budget.back() == '%') {
    budget.pop_back();
    size_t used = 0;
    try {
      e.budget_pct = std::stod(budget, &used);
    } catch (const std::exception&) { bad(full, "budget '" + budget + "%' is not a percentage"); }
    if (used != budget.size() || !(e.budget_pct > 0) || e.budget_pct > 100)
      bad(full, "a percentage budget must be in (0, 100]");
  } else {
    e.budget = parse_int(full, budget, "budget");
  }
  return e;
}

std::string describe_evict(const EvictConfig& e) {
  if (!e.on()) return "off";
  std::string s = std::string(evict_policy_name(e.policy)) + ":";
  if (e.budget_pct > 0) {
    char b[32];
    std::snprintf(b, sizeof b, "%g%%", e.budget_pct);
    s += b;
  } else {
    s += std::to_string(e.budget);
  }
  if (e.recent >= 0) s += ":" + std::to_string(e.recent);
  if (e.per_layer()) s += ":layer";
  return s;
}

}  // namespace kvscope
