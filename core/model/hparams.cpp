#include "model/hparams.h"

#include "gguf/gguf_file.h"

namespace kvscope {

int32_t checked_i32(int64_t v, const std::string& what, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throw ModelError(what + " = " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  return static_cast<int32_t>(v);
}

int32_t required_i32(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  const std::optional<int64_t> v = f.get_int(key);
  if (!v) throw ModelError("missing hyper-parameter '" + key + "'");
  return checked_i32(*v, key, lo, hi);
}

std::vector<int64_t> per_layer_ints(const GgufFile& f, const std::string& key, int32_t n_layer, const int64_t* def) {
  const GgufValue* v = f.find(key);
  if (!v) {
    if (!def) throw ModelError("missing hyper-parameter '" + key + "'");
    return std::vector<int64_t>(static_cast<size_t>(n_layer), *def);
  }
  if (v->type == GgufValueType::ARRAY) {
    std::vector<int64_t> a = v->as_int_array();
    if (static_cast<int64_t>(a.size()) < n_layer)
      throw ModelError(key + " has " + std::to_string(a.size()) + " entries for " + std::to_string(n_layer) +
                       " layers");
    a.resize(static_cast<size_t>(n_layer));
    return a;
  }
  const std::optional<int64_t> x = f.get_int(key);
  if (!x) throw ModelError(key + " is not an integer");
  return std::vector<int64_t>(static_cast<size_t>(n_layer), *x);
}

}  // namespace kvscope
