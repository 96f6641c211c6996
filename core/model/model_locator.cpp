#include "model/model_locator.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "model/synthetic_model.h"

namespace fs = std::filesystem;

namespace kvscope {

static std::string cache_root() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kvscope";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kvscope";
  return (fs::temp_directory_path() / "kvscope").string();
}

std::string user_model_dir() {
  if (const char* d = std::getenv("KVSCOPE_MODEL_DIR"); d && *d) return d;
  return cache_root() + "/models";
}

std::string ensure_synthetic_default_model() {
  const fs::path dir = fs::path(cache_root()) / "synthetic";
  const fs::path path = dir / "kvscope-synthetic-llama-v1.gguf";
  if (fs::exists(path)) return path.string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir.string() + ": " + ec.message());
  SyntheticSpec spec;  // llama, 256 wide, 2 layers, 512 tokens: starts instantly
  const fs::path tmp = path.string() + ".tmp";
  write_synthetic_model(spec, tmp.string());
  fs::rename(tmp, path);
  return path.string();
}

ModelChoice resolve_model(const std::string& cli_model) {
  if (!cli_model.empty()) {
    if (!fs::exists(cli_model)) throw std::runtime_error("model file not found: " + cli_model);
    return {cli_model, "--model", ""};
  }
  if (const char* env = std::getenv("KVSCOPE_MODEL"); env && *env) {
    if (!fs::exists(env)) throw std::runtime_error("$KVSCOPE_MODEL points to a missing file: " + std::string(env));
    return {env, "$KVSCOPE_MODEL", ""};
  }
  const std::string dir = user_model_dir();
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".gguf") found.push_back(e.path().string());
    std::sort(found.begin(), found.end());
    if (!found.empty()) return {found.front(), "user model folder", ""};
  }
  return {ensure_synthetic_default_model(), "synthetic",
          "no model given (--model, $KVSCOPE_MODEL, or a .gguf in " + dir +
              "): using kvscope's built-in synthetic model with RANDOM WEIGHTS, so its text is gibberish"};
}

}  // namespace kvscope
