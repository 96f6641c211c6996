#pragma once
// Read-only view of a GGUF v2/v3 file: metadata, tensor infos, tensor data.
// Every count, length, offset and size is validated against the file size before it is used;
// any problem throws GgufError with a message naming the problem (and the key/tensor involved).
//
// Nothing is read through a file mapping. The header is read with pread(), and the tensor data
// section is copied with pread() into memory this object owns the first time a tensor is viewed
// (then the file is closed). A mapping of a file that another process truncates in place raises
// SIGBUS on the next read of a dropped page, anywhere in the engine, and no check before a read
// can close that window; owned memory cannot change under us. A file that shrinks while it is
// being read gives a GgufError ("the file shrank while it was being read"). Metadata-only users
// (inspect, plan) never view a tensor, so they read only the header.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_types.h"

namespace kvscope {

namespace gguf_detail {
class ByteReader;  // gguf_file.cpp: bounds-checked reads with offsets in every error
}

struct GgufError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars keep their declared type; arrays keep their element type.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  GgufValueType elem_type = GgufValueType::UINT8;  // meaningful for ARRAY only
  uint64_t u = 0;                                  // unsigned integer types, BOOL (0/1)
  int64_t i = 0;                                   // signed integer types
  double f = 0;                                    // FLOAT32 / FLOAT64
  std::string s;                                   // STRING
  std::vector<GgufValue> arr;                      // ARRAY (nested arrays allowed)

  bool is_integer() const;
  bool is_float() const;
  // Conversions throw GgufError when the value is not of a compatible kind.
  int64_t as_int() const;   // any integer type or BOOL
  double as_float() const;  // any integer or float type
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

// View of one tensor's bytes inside the GgufFile's owned copy (valid while the file object lives).
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
  // Reads and parses the header (metadata, tensor infos); keeps the file open until the tensor
  // data is first needed. Throws GgufError (bad magic, v1, truncation, hostile values...).
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
  // Throws if the type is unsupported, or (first call on an opened file) if the tensor data
  // cannot be read in full. Thread-safe.
  TensorView view(const GgufTensorInfo& t) const;
  // Reads the tensor data now (view() does it on first use). Idempotent, thread-safe.
  void load_tensor_data() const;
  // Bytes of tensor data held in memory by this object (0 until loaded; the whole buffer for
  // from_bytes).
  uint64_t resident_bytes() const;

 private:
  GgufFile() = default;
  // Makes the file's bytes [0, end) available (end <= size_) and returns their start; may also
  // report more bytes available than asked for (*avail >= end).
  using ByteFetch = std::function<const uint8_t*(uint64_t end, uint64_t* avail)>;
  void parse(const ByteFetch& fetch);
  void parse_header(gguf_detail::ByteReader& r, uint64_t& n_tensors, uint64_t& n_kv);
  void parse_metadata(gguf_detail::ByteReader& r, uint64_t n_kv);
  std::vector<uint64_t> parse_tensor_infos(gguf_detail::ByteReader& r, uint64_t n_tensors);  // each info's offset
  void check_data_section(gguf_detail::ByteReader& r, const std::vector<uint64_t>& info_at);
  void read_tensor_data() const;

  std::string path_;
  uint64_t size_ = 0;
  std::vector<uint8_t> owned_;  // the whole file when parsed from memory
  // Opened files: the descriptor (until the data is read) and the data section copy.
  mutable int fd_ = -1;
  mutable std::once_flag data_once_;
  mutable void* data_map_ = nullptr;  // anonymous mapping holding [data_offset_, data_offset_ + data_bytes_)
  mutable uint64_t data_bytes_ = 0;
  mutable uint64_t data_map_bytes_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section, from_bytes only (else data_map_)
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKV> kv_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace kvscope
