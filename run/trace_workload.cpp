#include "run/trace_workload.h"

#include <algorithm>
#include <stdexcept>

#include "run/trace_replay.h"

namespace kvscope {

Workload trace_to_workload(std::span<const TraceRequest> reqs, int64_t vocab_size, const std::string& name) {
  Workload w;
  w.name = name;
  w.description = "requests of a trace with replay's synthesized prompt ids, one at a time";
  int64_t step = 0;
  int32_t longest = 1;
  for (const TraceRequest& r : reqs) {
    if (r.input_length == 0) throw TraceError(r.line, "an empty prompt cannot become a workload request");
    WorkloadRequest q;
    q.id = "line-" + std::to_string(r.line);
    synthesize_prompt(r, q.prompt_ids, vocab_size);
    q.max_new_tokens = 1;
    q.ignore_eos = true;
    q.arrival_step = step;
    // Every step computes at least one token, so input_length + 1 steps finish the request
    // (prefill, then its one sampled token) before the next one arrives.
    step += r.input_length + 2;
    longest = std::max(longest, r.input_length + 1);
    w.requests.push_back(std::move(q));
  }
  w.max_model_len = longest;
  return w;
}

}  // namespace kvscope
