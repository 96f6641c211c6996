#pragma once
// Copies a parsed GGUF file into a GgufWriter with edits: drop or change metadata keys, change a
// tensor's type, shape or values, drop or add tensors. Used to make broken model files from good
// ones (tests/core/model/test_model_errors.cpp) and small fuzz seeds (tests/fuzz/make_seeds.cpp).
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace kvscope::test {

// One tensor on its way into the writer, as f32 values (dequantized from the file).
struct TensorCopy {
  std::string name;
  std::vector<int64_t> ne;
  GgmlType type = GgmlType::F32;  // the type it is written in (re-quantized from `data`)
  std::vector<float> data;        // n_elements values
  bool keep = true;
  // When set, written as these raw bytes with this raw type (types kvscope cannot encode).
  bool raw = false;
  uint32_t raw_type = 0;
  std::vector<uint8_t> raw_bytes;
};

struct RewriteEdits {
  std::function<bool(const std::string& key)> keep_key;  // default: keep every key
  std::function<void(TensorCopy&)> tensor;               // default: copy as is
};

inline std::vector<float> tensor_as_f32(const GgufFile& f, const GgufTensorInfo& t) {
  const TensorView v = f.view(t);
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  const int64_t ne0 = v.ne(0);
  for (int64_t r = 0; r < v.rows(); ++r) dequantize_row(v.type(), v.row(r), out.data() + r * ne0, ne0);
  return out;
}

inline GgufWriter rewrite_gguf(const GgufFile& f, const RewriteEdits& edits = {}) {
  GgufWriter w(f.alignment());
  for (const GgufKV& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;  // the writer adds it for a non-default alignment
    if (edits.keep_key && !edits.keep_key(kv.key)) continue;
    w.set(kv.key, kv.value);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    TensorCopy c;
    c.name = t.name;
    c.ne = t.ne;
    c.type = t.type();
    c.data = tensor_as_f32(f, t);
    if (edits.tensor) edits.tensor(c);
    if (!c.keep) continue;
    if (c.raw)
      w.add_raw_tensor(c.name, c.ne, c.raw_type, c.raw_bytes);
    else
      w.add_tensor(c.name, c.ne, c.type, c.data);
  }
  return w;
}

}  // namespace kvscope::test
