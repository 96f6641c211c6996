#include "jinja/json_dump.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "jinja/error.h"

namespace kvscope::jinja {

namespace {

void append_escape(std::string& out, uint32_t cp) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\u%04x", cp);
  out += buf;
}

uint32_t decode(const std::string& s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  uint32_t cp = n == 3 ? c & 0x07 : n == 2 ? c & 0x0F : n == 1 ? c & 0x1F : c;
  for (; n > 0 && i + 1 < s.size(); --n) cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F);
  return cp;
}

std::string quote(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      append_escape(out, c);
    } else if (c >= 0x80 && ensure_ascii) {
      const uint32_t cp = decode(s, i);
      if (cp >= 0x10000) {
        append_escape(out, 0xD800 + ((cp - 0x10000) >> 10));
        append_escape(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        append_escape(out, cp);
      }
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string scalar(const Value& v) {
  if (v.is_none()) return "null";
  if (v.is_bool()) return v.as_int() ? "true" : "false";
  if (v.is_int()) return std::to_string(v.as_int());
  const double d = v.as_double();
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

std::string key_text(const Value& k, const JsonDumpOptions& o) {
  if (k.is_string()) return quote(k.str(), o.ensure_ascii);
  if (k.is_number() || k.is_none()) return cat({"\"", scalar(k), "\""});
  throw Error("keys must be str, int, float, bool or None, not " + k.type_name());
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& o) : o_(o) {}
  void dump(const Value& v, int level);
  std::string out;

 private:
  void newline(int level) {
    if (!o_.has_indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += o_.indent;
  }
  void dump_dict(const Value& v, int level);
  const JsonDumpOptions& o_;
};

void Dumper::dump(const Value& v, int level) {
  if (level > 500) throw Error("tojson: value nested too deeply");
  if (v.is_string()) {
    out += quote(v.str(), o_.ensure_ascii);
  } else if (v.is_none() || v.is_number()) {
    out += scalar(v);
  } else if (v.is_plain_seq()) {
    if (v.items().empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < v.items().size(); ++i) {
      if (i) out += o_.item_sep;
      newline(level + 1);
      dump(v.items()[i], level + 1);
    }
    newline(level);
    out += ']';
  } else if (v.is_dict() && !v.dict_box().is_namespace) {
    dump_dict(v, level);
  } else {
    throw Error("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

void Dumper::dump_dict(const Value& v, int level) {
  if (v.entries().empty()) {
    out += "{}";
    return;
  }
  std::vector<const std::pair<Value, Value>*> entries;
  for (const auto& e : v.entries()) entries.push_back(&e);
  if (o_.sort_keys)
    std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return less(a->first, b->first); });
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += o_.item_sep;
    newline(level + 1);
    out += key_text(entries[i]->first, o_) + o_.key_sep;
    dump(entries[i]->second, level + 1);
  }
  newline(level);
  out += '}';
}

}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper d(options);
  d.dump(v, 0);
  return d.out;
}

}  // namespace kvscope::jinja
