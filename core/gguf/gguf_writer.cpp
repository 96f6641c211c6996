// GGUF v3 writer: header, metadata, tensor infos, then tensor data, each tensor starting on an
// `alignment` boundary and padded to it (as ggml's gguf writer does).
#include "gguf/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace kvscope {

namespace {

class ByteSink {
 public:
  std::vector<uint8_t> bytes;
  void append(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = bytes.size();
    bytes.resize(at + n);
    std::memcpy(bytes.data() + at, p, n);
  }
  template <typename T>
  void put(T v) {
    append(&v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    append(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
  }
};

void put_value(ByteSink& out, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8:
      out.put(static_cast<uint8_t>(v.u));
      break;
    case GgufValueType::INT8:
      out.put(static_cast<int8_t>(v.i));
      break;
    case GgufValueType::UINT16:
      out.put(static_cast<uint16_t>(v.u));
      break;
    case GgufValueType::INT16:
      out.put(static_cast<int16_t>(v.i));
      break;
    case GgufValueType::UINT32:
      out.put(static_cast<uint32_t>(v.u));
      break;
    case GgufValueType::INT32:
      out.put(static_cast<int32_t>(v.i));
      break;
    case GgufValueType::UINT64:
      out.put(static_cast<uint64_t>(v.u));
      break;
    case GgufValueType::INT64:
      out.put(static_cast<int64_t>(v.i));
      break;
    case GgufValueType::FLOAT32:
      out.put(static_cast<float>(v.f));
      break;
    case GgufValueType::FLOAT64:
      out.put(v.f);
      break;
    case GgufValueType::BOOL:
      out.put(static_cast<uint8_t>(v.u != 0));
      break;
    case GgufValueType::STRING:
      out.put_string(v.s);
      break;
    case GgufValueType::ARRAY:
      out.put(static_cast<uint32_t>(v.elem_type));
      out.put<uint64_t>(v.arr.size());
      for (const auto& e : v.arr) {
        if (e.type != v.elem_type)
          throw std::invalid_argument(std::string("GgufWriter: array of ") + gguf_value_type_name(v.elem_type) +
                                      " holds a " + gguf_value_type_name(e.type));
        put_value(out, e);
      }
      break;
  }
}

GgufValue scalar(GgufValueType t) {
  GgufValue v;
  v.type = t;
  return v;
}

GgufValue array_of(GgufValueType elem) {
  GgufValue v;
  v.type = GgufValueType::ARRAY;
  v.elem_type = elem;
  return v;
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kv_.push_back({key, std::move(value)});
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  GgufValue x = scalar(GgufValueType::UINT32);
  x.u = v;
  set(key, std::move(x));
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  GgufValue x = scalar(GgufValueType::INT32);
  x.i = v;
  set(key, std::move(x));
}
void GgufWriter::set_u64(const std::string& key, uint64_t v) {
  GgufValue x = scalar(GgufValueType::UINT64);
  x.u = v;
  set(key, std::move(x));
}
void GgufWriter::set_f32(const std::string& key, float v) {
  GgufValue x = scalar(GgufValueType::FLOAT32);
  x.f = v;
  set(key, std::move(x));
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  GgufValue x = scalar(GgufValueType::BOOL);
  x.u = v ? 1 : 0;
  set(key, std::move(x));
}
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  GgufValue x = scalar(GgufValueType::STRING);
  x.s = v;
  set(key, std::move(x));
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  GgufValue x = array_of(GgufValueType::STRING);
  for (const auto& s : v) {
    GgufValue e = scalar(GgufValueType::STRING);
    e.s = s;
    x.arr.push_back(std::move(e));
  }
  set(key, std::move(x));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  GgufValue x = array_of(GgufValueType::FLOAT32);
  for (float f : v) {
    GgufValue e = scalar(GgufValueType::FLOAT32);
    e.f = f;
    x.arr.push_back(std::move(e));
  }
  set(key, std::move(x));
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  GgufValue x = array_of(GgufValueType::INT32);
  for (int32_t i : v) {
    GgufValue e = scalar(GgufValueType::INT32);
    e.i = i;
    x.arr.push_back(std::move(e));
  }
  set(key, std::move(x));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                            const std::vector<float>& data) {
  const GgmlTypeInfo info = ggml_type_info(type);
  if (info.block_elems == 0) throw std::invalid_argument("GgufWriter: unknown tensor type for '" + name + "'");
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0) throw std::invalid_argument("GgufWriter: tensor '" + name + "' has a non-positive dimension");
    n *= d;
  }
  if (static_cast<int64_t>(data.size()) != n)
    throw std::invalid_argument("GgufWriter: tensor '" + name + "' has " + std::to_string(data.size()) +
                                " values for " + std::to_string(n) + " elements");
  const int64_t ne0 = ne.empty() ? 1 : ne[0];
  if (ne0 % info.block_elems != 0)
    throw std::invalid_argument("GgufWriter: tensor '" + name + "' ne[0] is not a multiple of the " + info.name +
                                " block size");
  std::vector<uint8_t> bytes(ggml_row_bytes(type, n));
  quantize_row(type, data.data(), bytes.data(), n);  // blocks never straddle rows, so one call is fine
  tensors_.push_back({name, std::move(ne), static_cast<uint32_t>(type), std::move(bytes)});
}

void GgufWriter::add_raw_tensor(const std::string& name, std::vector<int64_t> ne, uint32_t raw_type,
                                std::vector<uint8_t> bytes) {
  tensors_.push_back({name, std::move(ne), raw_type, std::move(bytes)});
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
    throw std::invalid_argument("GgufWriter: alignment must be a nonzero power of two");
  // A non-default alignment must be recorded or readers would look for data in the wrong place.
  // An explicit general.alignment set by the caller is written as given (tests use that to
  // produce files that lie about it).
  std::vector<GgufKV> kv = kv_;
  bool has_alignment_key = false;
  for (const auto& e : kv) has_alignment_key |= e.key == "general.alignment";
  if (alignment_ != 32 && !has_alignment_key) {
    GgufValue v = scalar(GgufValueType::UINT32);
    v.u = alignment_;
    kv.push_back({"general.alignment", v});
  }

  ByteSink out;
  out.append("GGUF", 4);
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(kv.size());
  for (const auto& e : kv) {
    out.put_string(e.key);
    out.put(static_cast<uint32_t>(e.value.type));
    put_value(out, e.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) out.put(d);
    out.put(t.raw_type);
    out.put(offset);
    offset += (t.bytes.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  out.pad_to(alignment_);
  for (const auto& t : tensors_) {
    out.append(t.bytes.data(), t.bytes.size());
    out.pad_to(alignment_);
  }
  return std::move(out.bytes);
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("GgufWriter: cannot create '" + path + "': " + std::strerror(errno));
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool ok = written == bytes.size() && std::fflush(f) == 0;
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error("GgufWriter: write to '" + path + "' failed");
}

}  // namespace kvscope
