#pragma once
// The one rule book for engine settings. The CLI, the Settings and Compare panels and the
// engine constructor all call validate(); each problem names the EngineConfig field it is about
// (so a panel can show it beside that field) and says why in a sentence a user can act on.
// Rules that need the backend (can it store two KV groups?) or the derived pool split stay in
// kv_setup.cpp, where those are known.
#include <string>
#include <vector>

#include "engine/engine_config.h"
#include "model/model_config.h"

namespace kvscope {

struct ConfigProblem {
  std::string field;  // EngineConfig member: "block_size", "window", "sinks", "max_model_len", ...
  std::string message;
  // The engine runs it, but it is almost surely a mistake (a window smaller than one block
  // drops nothing, a one-block pool fits no real sequence, a baseline whose reservation exceeds
  // the pool admits nothing): interactive callers (the Settings panel) refuse it, the engine
  // and the CLI accept it, so scripted experiments and tests can still build such engines.
  bool advisory = false;
};

std::vector<ConfigProblem> validate(const EngineConfig& cfg, const ModelConfig& model);
// The problems that stop an engine (advisory ones left out).
std::vector<ConfigProblem> blocking_problems(const std::vector<ConfigProblem>& problems);
// All messages joined with "; " (empty when there is none): for exceptions and CLI errors.
std::string describe_problems(const std::vector<ConfigProblem>& problems);

}  // namespace kvscope
