#pragma once
// Which model the app opens when the user names none: --model, then $KVSCOPE_MODEL, then the
// first .gguf in the user's model folder (~/.cache/kvscope/models), and finally a small
// synthetic model that kvscope writes itself (random weights, and labelled so everywhere).
#include <string>

namespace kvscope {

struct ModelChoice {
  std::string path;
  std::string source;  // "--model", "$KVSCOPE_MODEL", "user model folder", "synthetic"
  std::string note;    // shown to the user (e.g. why the synthetic model was chosen)
};

std::string user_model_dir();  // $KVSCOPE_MODEL_DIR or $XDG_CACHE_HOME/kvscope/models or ~/.cache/kvscope/models
// Throws std::runtime_error when a named model does not exist or the synthetic one cannot be written.
ModelChoice resolve_model(const std::string& cli_model);
// Writes (once) and returns the path of the built-in synthetic model.
std::string ensure_synthetic_default_model();

}  // namespace kvscope
