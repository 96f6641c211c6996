#pragma once
// Options shared by every subcommand that runs the engine, and how they become a Model and an
// EngineConfig.
#include <memory>
#include <set>
#include <string>

#include "cli/args.h"
#include "engine/engine.h"
#include "model/model.h"

namespace kvscope::cli {

const std::set<std::string>& engine_option_names();  // --model --threads --block-size ...
std::set<std::string> with_engine_options(std::set<std::string> extra);

struct LoadedModel {
  std::shared_ptr<Model> model;
  std::string path;
  std::string note;  // e.g. "synthetic model with random weights"
};
LoadedModel load_model(const Args& a);                      // resolves the default model when --model is absent
EngineConfig engine_config(const Args& a, const Model& m);  // validates values, throws UsageError
// --backend auto (CUDA when a device is present, else CPU) | cpu | cuda.
std::unique_ptr<Backend> make_backend(const Args& a, std::shared_ptr<Model> m);
std::unique_ptr<Engine> make_engine(const Args& a, std::shared_ptr<Model> m);
// --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n --seed over `defaults` (the
// engine's greedy ones unless a command says otherwise; chat starts from chat_sampling_defaults()).
SamplingParams sampling_params(const Args& a, const SamplingParams& defaults = {});

}  // namespace kvscope::cli
