#pragma once
// A workload: a named list of requests that the engine, `kvscope-cli run` and the GUI runner
// replay. It is plain data (text or token ids, arrival steps, sampling); tokenization and
// submission belong to the replayer (see workload_tokens.h for the helpers it needs).
//
// JSON format (resources/scenarios/README.md has the full description):
//   {"name": "...", "description": "...", "max_model_len": 512,
//    "requests": [{"id": "q0", "prompt": "text" | "prompt_ids": [1, 2],
//                  "arrival_step": 0, "arrival_s": 0.5, "max_tokens": 32, "ignore_eos": true, "n": 1,
//                  "sampling": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
//                               "repetition_penalty": 1.1, "repetition_last_n": 64, "seed": 7},
//                  "conversation": "c1", "turn": 0}]}
// Unknown keys are rejected (a typo such as "max_token" would otherwise silently fall back to a
// default and skew a measurement); keys starting with '_' are ignored so files can carry comments.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "types/sampling_params.h"

namespace kvscope {

struct WorkloadRequest {
  std::string id;  // unique within the workload; used as the engine's label
  // Exactly one of the two is non-empty. For a conversation turn > 0, `prompt` / `prompt_ids`
  // hold only the NEW user text: the replayer prepends the previous turn's full token sequence
  // (see build_turn_prompt in workload_tokens.h).
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  int64_t arrival_step = 0;     // engine step at which it is submitted (0 = at start);
                                // for turn > 0 the earliest step, also waiting for turn - 1
  double arrival_s = 0;         // seconds after the run started (wall clock); a request is
                                // submitted once both its step and its time have come
  int32_t max_new_tokens = 16;  // JSON "max_tokens"
  bool ignore_eos = false;
  std::optional<SamplingParams> sampling;  // absent: the runner's default (greedy)
  int32_t n = 1;                           // parallel samples of this prompt (Engine::submit_parallel)
  std::string conversation;                // empty: not part of a multi-turn chat
  int32_t turn = 0;                        // 0-based index within `conversation`

  bool has_ids() const { return !prompt_ids.empty(); }
  bool is_follow_up_turn() const { return !conversation.empty() && turn > 0; }
};

struct Workload {
  std::string name;
  std::string description;
  std::optional<int32_t> max_model_len;  // the context the scenario is designed for; a runner uses
                                         // it unless its own setting overrides it
  std::vector<WorkloadRequest> requests;
};

// Throw std::runtime_error naming the field and request index, e.g.
//   "workload: requests[3] (id "q3"): max_tokens: expected an integer >= 1, got -5".
Workload parse_workload(const nlohmann::json& j);
Workload load_workload(const std::filesystem::path& path);  // errors are prefixed with the path

// Writes only what differs from the defaults, so exported files stay short and readable.
nlohmann::json to_json(const Workload& w);
nlohmann::json to_json(const SamplingParams& s);
void save_workload(const std::filesystem::path& path, const Workload& w);  // 2-space indented

// Cross-request rules that parse_workload enforces; exposed for generators and tests:
// unique ids, each conversation has turns 0..T-1 once each, in file order, with non-decreasing
// arrival steps, and no n > 1 inside a conversation (which sample would continue it?).
void validate_workload(const Workload& w);

}  // namespace kvscope
