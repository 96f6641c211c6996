#pragma once
// Renders a Jinja chat template as Python's jinja2 does with the settings Hugging Face
// transformers uses: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols]) with the globals raise_exception and strftime_now and
// transformers' tojson filter (docs/chat.md lists what is supported).
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kvscope::jinja {

struct RenderOptions {
  int64_t max_output_bytes = 64 << 20;  // any string the template builds, the output too
  int64_t max_loop_iterations = 10'000'000;
  int max_depth = 400;  // nested evaluation, statements and macro calls
  // Wall-clock time: every string and list is bounded, but a loop may copy or scan a big one
  // again and again, and this bounds the product.
  double max_seconds = 10.0;
  std::optional<std::tm> now;  // what strftime_now formats; unset: the local time
};

// Throws jinja::Error (error.h) on a syntax error, an undefined use, a type error, a
// limit, or the template's raise_exception(message).
std::string render(const std::string& source, const nlohmann::ordered_json& variables,
                   const RenderOptions& options = {});

}  // namespace kvscope::jinja
