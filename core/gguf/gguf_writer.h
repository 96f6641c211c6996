#pragma once
// Writes GGUF v3 files: metadata of every value type and tensors of any supported dtype.
// Used by tests (synthetic and deliberately broken files) and `kvscope-cli make-model`.
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"

namespace kvscope {

class GgufWriter {
 public:
  // general.alignment is added automatically when alignment != 32; a general.alignment set
  // explicitly with set() is written as given (tests use that to make lying files).
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}
  void set(const std::string& key, GgufValue value);  // replaces an existing key
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // f32 data is converted/quantized to `type` (ne[0] must be a multiple of its block size).
  void add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type, const std::vector<float>& data);
  // Raw bytes as they should appear in the file (for hand-made and hostile tensors).
  void add_raw_tensor(const std::string& name, std::vector<int64_t> ne, uint32_t raw_type, std::vector<uint8_t> bytes);
  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // throws std::runtime_error on I/O failure

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    uint32_t raw_type;
    std::vector<uint8_t> bytes;
  };
  uint64_t alignment_;
  std::vector<GgufKV> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvscope
