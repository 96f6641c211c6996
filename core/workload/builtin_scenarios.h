#pragma once
// The ready scenarios shipped in resources/scenarios/, defined here as generator calls so that
// the JSON files can be regenerated (and a test can check they still match their definition).
#include <filesystem>
#include <vector>

#include "workload/workload.h"

namespace kvscope {

// In a fixed order; each workload's file is "<name>.json".
std::vector<Workload> builtin_scenarios();

// Writes every builtin scenario into `dir` (created if needed); returns the paths written.
std::vector<std::filesystem::path> write_builtin_scenarios(const std::filesystem::path& dir);

}  // namespace kvscope
