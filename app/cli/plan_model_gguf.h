#pragma once
// A GGUF file's shape for the planner (kv/kv_planner.h): `plan --model` and `replay --model`.
#include <string>

#include "kv/kv_planner.h"

namespace kvscope::cli {

// Parameter count and stored bytes from its tensors; MoE: the parameters one token reads.
PlanModel plan_model_from_gguf(const std::string& path);

}  // namespace kvscope::cli
