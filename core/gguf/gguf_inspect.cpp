// GGUF summaries (JSON and text). Metadata strings come from untrusted files, so they are made
// valid UTF-8 before they enter JSON (nlohmann::json::dump() throws on invalid UTF-8).
#include "gguf/gguf_inspect.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace kvscope {

namespace {

constexpr size_t kMaxArrayInline = 16;  // longer arrays are summarised
constexpr size_t kArrayHead = 8;

// Replaces each byte that does not start a well-formed UTF-8 sequence with U+FFFD.
std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len > 1) {
      // Reject overlong encodings, surrogates and code points past U+10FFFF.
      uint32_t cp = c & (0xFF >> (len + 1));
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
      ok = cp >= min_cp && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

nlohmann::json value_json(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::UINT8:
    case GgufValueType::UINT16:
    case GgufValueType::UINT32:
    case GgufValueType::UINT64:
      return v.u;
    case GgufValueType::INT8:
    case GgufValueType::INT16:
    case GgufValueType::INT32:
    case GgufValueType::INT64:
      return v.i;
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64:
      return v.f;
    case GgufValueType::BOOL:
      return v.u != 0;
    case GgufValueType::STRING:
      return valid_utf8(v.s);
    case GgufValueType::ARRAY: {
      nlohmann::json items = nlohmann::json::array();
      const size_t n = v.arr.size() > kMaxArrayInline ? kArrayHead : v.arr.size();
      for (size_t k = 0; k < n; ++k) items.push_back(value_json(v.arr[k]));
      if (v.arr.size() <= kMaxArrayInline) return items;
      return {{"type", gguf_value_type_name(v.elem_type)}, {"count", v.arr.size()}, {"head", items}};
    }
  }
  return nullptr;
}

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "]";
}

std::string value_text(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::STRING: {
      std::string s = valid_utf8(v.s);
      if (s.size() > 80) s.replace(77, std::string::npos, "...");
      std::string out = "\"";
      for (char c : s) {
        if (c == '\n')
          out.append("\\n");
        else
          out.push_back(c);
      }
      out.push_back('"');
      return out;
    }
    case GgufValueType::ARRAY: {
      // Built with append(): GCC 12 warns (-Wrestrict, a false positive) on "[" + std::string.
      std::string out = "[";
      out.append(std::to_string(v.arr.size())).append(" x ").append(gguf_value_type_name(v.elem_type)).append("]");
      if (v.arr.empty()) return out;
      const size_t n = std::min<size_t>(v.arr.size(), 4);
      for (size_t k = 0; k < n; ++k) out.append(k ? ", " : " ").append(value_text(v.arr[k]));
      if (v.arr.size() > n) out.append(", ...");
      return out;
    }
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", v.f);
      return buf;
    }
    default:
      return value_json(v).dump();
  }
}

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(uint64_t{1} << 30));
  else if (b >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(uint64_t{1} << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace

nlohmann::json gguf_summary_json(const GgufFile& f) {
  nlohmann::json j;
  j["path"] = valid_utf8(f.path());
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["file_size"] = f.file_size();
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& kv : f.metadata()) meta[valid_utf8(kv.key)] = value_json(kv.value);
  j["metadata"] = std::move(meta);

  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, int64_t> type_counts;
  int64_t n_params = 0;
  uint64_t tensor_bytes = 0;
  for (const auto& t : f.tensors()) {
    const std::string type = ggml_type_name(t.raw_type);
    tensors.push_back(
        {{"name", valid_utf8(t.name)}, {"type", type}, {"shape", t.ne}, {"offset", t.offset}, {"bytes", t.nbytes}});
    ++type_counts[type];
    n_params += t.n_elements();
    tensor_bytes += t.nbytes;
  }
  j["tensors"] = std::move(tensors);
  j["n_tensors"] = f.tensors().size();
  j["n_params"] = n_params;
  j["tensor_bytes"] = tensor_bytes;
  j["type_counts"] = type_counts;
  return j;
}

std::string gguf_summary_text(const GgufFile& f) {
  std::ostringstream os;
  os << "GGUF v" << f.version() << "  " << f.path() << "\n"
     << "  file size " << human_bytes(f.file_size()) << ", alignment " << f.alignment() << ", data at byte "
     << f.data_offset() << "\n\n";
  os << "metadata (" << f.metadata().size() << " keys)\n";
  for (const auto& kv : f.metadata())
    os << "  " << valid_utf8(kv.key) << " : " << gguf_value_type_name(kv.value.type) << " = " << value_text(kv.value)
       << "\n";

  int64_t n_params = 0;
  uint64_t tensor_bytes = 0;
  std::map<std::string, int64_t> type_counts;
  os << "\ntensors (" << f.tensors().size() << ")\n";
  for (const auto& t : f.tensors()) {
    const std::string type = ggml_type_name(t.raw_type);
    char line[256];
    std::snprintf(line, sizeof line, "  %-40s %-8s %-24s %s\n", valid_utf8(t.name).c_str(), type.c_str(),
                  shape_str(t.ne).c_str(), human_bytes(t.nbytes).c_str());
    os << line;
    n_params += t.n_elements();
    tensor_bytes += t.nbytes;
    ++type_counts[type];
  }
  os << "\n" << n_params << " parameters, " << human_bytes(tensor_bytes) << " of tensor data; types:";
  for (const auto& [type, n] : type_counts) os << " " << type << " x" << n;
  os << "\n";
  return os.str();
}

}  // namespace kvscope
