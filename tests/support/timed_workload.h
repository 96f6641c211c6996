#pragma once
// A two-request workload for the arrival-by-time tests (core runner and GUI worker): "now"
// arrives at once, "later" after `later_s` seconds of wall time; 8 tokens each.
#include "workload/workload.h"

namespace kvscope::test {

inline Workload now_and_later_workload(double later_s) {
  Workload w;
  w.name = "timed";
  for (const auto& [id, at] : {std::pair{"now", 0.0}, std::pair{"later", later_s}}) {
    WorkloadRequest r;
    r.id = id;
    r.prompt = "Once upon a time";
    r.max_new_tokens = 8;
    r.ignore_eos = true;
    r.arrival_s = at;
    w.requests.push_back(r);
  }
  return w;
}

}  // namespace kvscope::test
