#pragma once
// Read-only view of a GGUF v2/v3 file: metadata, tensor infos, zero-copy tensor data (mmap).
// Every count, length, offset and size is validated against the file size before it is used;
// any problem throws GgufError with a message naming the problem (and the key/tensor involved).
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_types.h"

namespace kvscope {

struct GgufError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars keep their declared type; arrays keep their element type.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  GgufValueType elem_type = GgufValueType::UINT8;  // meaningful for ARRAY only
  uint64_t u = 0;       // unsigned integer types, BOOL (0/1)
  int64_t i = 0;        // signed integer types
  double f = 0;         // FLOAT32 / FLOAT64
  std::string s;        // STRING
  std::vector<GgufValue> arr;  // ARRAY (nested arrays allowed)

  bool is_integer() const;
  bool is_float() const;
  // Conversions throw GgufError when the value is not of a compatible kind.
  int64_t as_int() const;    // any integer type or BOOL
  double as_float() const;   // any integer or float type
  bool as_bool() const;
  const std::string& as_string() const;
  std::vector<std::string> as_string_array() const;
  std::vector<float> as_float_array() const;
  std::vector<int64_t> as_int_array() const;
};

struct GgufKV {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous (row) dimension
  uint32_t raw_type = 0;    // as stored; may be a type kvscope does not support
  uint64_t offset = 0;      // relative to the start of the data section
  uint64_t nbytes = 0;      // validated: ggml_row_bytes * rows
  GgmlType type() const { return static_cast<GgmlType>(raw_type); }
  int64_t n_elements() const;
};

// Zero-copy view of one tensor's bytes inside the mapping.
struct TensorView {
  const GgufTensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  GgmlType type() const { return info->type(); }
  int64_t ne(int i) const { return i < static_cast<int>(info->ne.size()) ? info->ne[i] : 1; }
  int64_t rows() const;  // product of ne[1..]
  size_t row_bytes() const { return ggml_row_bytes(type(), ne(0)); }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes(); }
};

class GgufFile {
 public:
  // Maps and parses the file. Throws GgufError (bad magic, v1, truncation, hostile values...).
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // Parses an in-memory copy (used by the fuzzer and tests); the bytes are copied.
  static std::shared_ptr<GgufFile> from_bytes(const uint8_t* data, size_t size, std::string label = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<GgufKV>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  // nullopt when the key is absent; GgufError when it is present but of an incompatible kind.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  TensorView view(const GgufTensorInfo& t) const;  // throws if the type is unsupported

 private:
  GgufFile() = default;
  void parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;              // mmap base when mapped
  std::vector<uint8_t> owned_;       // bytes when parsed from memory
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKV> kv_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace kvscope
