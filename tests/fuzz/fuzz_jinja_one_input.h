#pragma once
// One fuzz input through the Jinja engine (core/jinja/): the bytes are a chat template,
// rendered against a fixed conversation with tools and reasoning under small limits. A
// jinja::Error is the documented outcome of a bad or hostile template; a finding is any other
// exception, an ASan/UBSan report, a hang, or output past the limit. Shared by the libFuzzer
// target (fuzz_jinja.cpp) and the seed replay in tests/core/jinja/test_jinja.cpp.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/error.h"
#include "jinja/template.h"

namespace kvscope::fuzz_jinja {

inline const nlohmann::ordered_json& conversation() {
  static const auto vars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in Paris? \u00e9\ud83c\udf0d"},
      {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
       "tool_calls": [{"id": "call12345", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"t\": 21}"},
      {"role": "assistant", "content": "21 degrees."},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": true})");
  return vars;
}

// Returns whether the template rendered (false: it raised jinja::Error).
inline bool run_one(const uint8_t* data, size_t size) {
  jinja::RenderOptions opt;
  opt.max_output_bytes = 1 << 20;
  opt.max_loop_iterations = 200000;
  opt.max_depth = 200;
  opt.max_seconds = 2;
  std::tm now{};
  now.tm_year = 126;
  now.tm_mday = 1;
  opt.now = now;
  try {
    const std::string out = jinja::render(std::string(reinterpret_cast<const char*>(data), size), conversation(), opt);
    if (static_cast<int64_t>(out.size()) > opt.max_output_bytes) {
      std::fprintf(stderr, "fuzz invariant: output of %zu bytes past the limit\n", out.size());
      std::abort();
    }
    return true;
  } catch (const jinja::Error&) { return false; }
}

}  // namespace kvscope::fuzz_jinja
