#pragma once
// A trace as a kvscope workload (resources/scenarios format), so that the same prompts replay
// hashes (run/trace_replay.h) can run through the live engine on a real model: `kvscope-cli run
// --workload` then reports the engine's cached prompt tokens for comparison with replay's hits.
#include <cstdint>
#include <span>
#include <string>

#include "run/trace_reader.h"
#include "workload/workload.h"

namespace kvscope {

// One request per trace request, in order: prompt_ids are replay's synthesized tokens (below
// vocab_size), max_tokens 1 (no generated token's K/V is ever cached, as in replay), and arrival
// steps far enough apart that each request finishes before the next arrives (one at a time, as
// replay runs them). Empty prompts are refused (a workload cannot hold them).
Workload trace_to_workload(std::span<const TraceRequest> reqs, int64_t vocab_size, const std::string& name);

}  // namespace kvscope
