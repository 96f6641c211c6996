#pragma once
// Python's json.dumps(x, ensure_ascii, indent, separators, sort_keys), the tojson filter that
// transformers installs (jinja2's own would HTML-escape).
#include <string>

#include "jinja/value.h"

namespace kvscope::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;    // the text of one level
  std::string item_sep;  // ", " without indent, "," with
  std::string key_sep = ": ";
  bool sort_keys = false;
};

std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace kvscope::jinja
