#pragma once
// Summaries of a GGUF file for `kvscope-cli inspect` and the model panel: version, metadata
// (long arrays abbreviated), tensors, parameter and byte totals, tensor count per type.
#include <string>

#include <nlohmann/json.hpp>

#include "gguf/gguf_file.h"

namespace kvscope {

// {"version", "alignment", "data_offset", "file_size", "metadata": {key: value},
//  "tensors": [{"name", "type", "shape", "offset", "bytes"}], "n_tensors", "n_params",
//  "tensor_bytes", "type_counts": {type: n}}. Arrays longer than 16 elements become
//  {"type": elem type, "count": N, "head": [first 8]}.
nlohmann::json gguf_summary_json(const GgufFile& f);

// The same facts as readable text: a header, the metadata one key per line, a tensor table.
std::string gguf_summary_text(const GgufFile& f);

}  // namespace kvscope
