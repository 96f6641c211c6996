#pragma once
// A small parser of the Prometheus text exposition format (version 0.0.4), for the /metrics
// of vLLM, SGLang and TensorRT-LLM. Handles:
//  - `# HELP name text` (escapes \\ and \n) and `# TYPE name counter|gauge|histogram|summary|untyped`;
//    any other `#` line is a comment (OpenMetrics' `# EOF` included);
//  - blank lines, `\n` or `\r\n` line ends, spaces and tabs between tokens;
//  - samples `name{label="value",...} value [timestamp]`: metric names [a-zA-Z_:][a-zA-Z0-9_:]*,
//    label names [a-zA-Z_][a-zA-Z0-9_]*, label values with \\ \" \n escapes, `{}` and a trailing
//    comma, values as decimal or exponent floats, +Inf/-Inf/Inf and NaN (any case), an
//    optional integer millisecond timestamp;
//  - histogram and summary series are plain samples (`_bucket{le=...}`, `_sum`, `_count`).
// Not handled (counted as errors, the line skipped): OpenMetrics exemplars (`# {...}` after a
// value), hexadecimal values, duplicate label names, a name or label that breaks the grammar.
// Every bad line is counted and the rest still parsed: an HTML page yields errors, no samples.
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvscope::attach {

struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written
  double value = 0;
  std::optional<int64_t> timestamp_ms;
};

struct PromText {
  std::vector<PromSample> samples;
  std::map<std::string, std::string> types;  // metric family -> counter, gauge, ...
  std::map<std::string, std::string> helps;
  size_t lines = 0;
  size_t errors = 0;
  std::string first_error;  // "line N: why"
};

PromText parse_prometheus_text(std::string_view text);

}  // namespace kvscope::attach
