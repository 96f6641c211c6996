// GgufValue accessors: typed conversions that fail loudly (GgufError) instead of guessing.
#include <limits>

#include "gguf/gguf_file.h"

namespace kvscope {

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
      return "uint8";
    case GgufValueType::INT8:
      return "int8";
    case GgufValueType::UINT16:
      return "uint16";
    case GgufValueType::INT16:
      return "int16";
    case GgufValueType::UINT32:
      return "uint32";
    case GgufValueType::INT32:
      return "int32";
    case GgufValueType::FLOAT32:
      return "float32";
    case GgufValueType::BOOL:
      return "bool";
    case GgufValueType::STRING:
      return "string";
    case GgufValueType::ARRAY:
      return "array";
    case GgufValueType::UINT64:
      return "uint64";
    case GgufValueType::INT64:
      return "int64";
    case GgufValueType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

namespace {

bool is_unsigned(GgufValueType t) {
  return t == GgufValueType::UINT8 || t == GgufValueType::UINT16 || t == GgufValueType::UINT32 ||
         t == GgufValueType::UINT64;
}
bool is_signed(GgufValueType t) {
  return t == GgufValueType::INT8 || t == GgufValueType::INT16 || t == GgufValueType::INT32 ||
         t == GgufValueType::INT64;
}

[[noreturn]] void wrong_kind(const GgufValue& v, const char* wanted) {
  std::string have = gguf_value_type_name(v.type);
  if (v.type == GgufValueType::ARRAY) have += std::string(" of ") + gguf_value_type_name(v.elem_type);
  throw GgufError(std::string("gguf value: expected ") + wanted + ", found " + have);
}

}  // namespace

bool GgufValue::is_integer() const { return is_unsigned(type) || is_signed(type); }
bool GgufValue::is_float() const { return type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64; }

int64_t GgufValue::as_int() const {
  if (is_signed(type)) return i;
  if (is_unsigned(type) || type == GgufValueType::BOOL) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw GgufError("gguf value: uint64 " + std::to_string(u) + " does not fit in int64");
    return static_cast<int64_t>(u);
  }
  wrong_kind(*this, "an integer");
}

double GgufValue::as_float() const {
  if (is_float()) return f;
  if (is_signed(type)) return static_cast<double>(i);
  if (is_unsigned(type)) return static_cast<double>(u);
  wrong_kind(*this, "a number");
}

bool GgufValue::as_bool() const {
  if (type == GgufValueType::BOOL || is_unsigned(type)) return u != 0;
  if (is_signed(type)) return i != 0;
  wrong_kind(*this, "a bool");
}

const std::string& GgufValue::as_string() const {
  if (type != GgufValueType::STRING) wrong_kind(*this, "a string");
  return s;
}

std::vector<std::string> GgufValue::as_string_array() const {
  if (type != GgufValueType::ARRAY || elem_type != GgufValueType::STRING) wrong_kind(*this, "an array of strings");
  std::vector<std::string> out;
  out.reserve(arr.size());
  for (const auto& e : arr) out.push_back(e.s);
  return out;
}

std::vector<float> GgufValue::as_float_array() const {
  if (type != GgufValueType::ARRAY) wrong_kind(*this, "an array of numbers");
  std::vector<float> out;
  out.reserve(arr.size());
  for (const auto& e : arr) out.push_back(static_cast<float>(e.as_float()));
  return out;
}

std::vector<int64_t> GgufValue::as_int_array() const {
  if (type != GgufValueType::ARRAY) wrong_kind(*this, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(arr.size());
  for (const auto& e : arr) out.push_back(e.as_int());
  return out;
}

}  // namespace kvscope
