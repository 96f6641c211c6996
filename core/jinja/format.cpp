// Python's two string formatting operations: str.format and printf-style `%`.
#include "jinja/format.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "jinja/error.h"

namespace kvscope::jinja {

// str.format with {}, {0} and {name} fields (no format specs).
std::string py_format(const std::string& fmt, const Args& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') throw Error("Single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw Error("Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) throw Error("format specs are not supported");
    size_t index = SIZE_MAX;
    if (field.empty())
      index = auto_index++;
    else if (field.size() < 18 && std::all_of(field.begin(), field.end(),
                                              [](char d) { return std::isdigit(static_cast<unsigned char>(d)); }))
      index = static_cast<size_t>(std::stoul(field));
    const std::string key = index == SIZE_MAX ? field : std::string("\x01");
    if (!a.has(index, key)) throw Error("format: no argument for '{" + field + "}'");
    const Value v = a.get(index, key);
    out += to_str(v);
    i = close;
  }
  return out;
}

namespace {

std::string number_spec(const std::string& spec, char conv, const Value& v) {
  if (!v.is_number())
    throw Error(cat({"%", std::string(1, conv), " format: a real number is required, not ", v.type_name()}));
  char buf[128];
  const std::string f = "%" + spec + (conv == 'i' || conv == 'd' ? std::string("lld") : std::string(1, conv));
  if (conv == 'd' || conv == 'i')
    std::snprintf(buf, sizeof buf, f.c_str(),
                  static_cast<long long>(v.is_float() ? Value::float_to_int(v.as_double()) : v.as_int()));
  else
    std::snprintf(buf, sizeof buf, f.c_str(), v.as_double());
  return buf;
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  const List values = args.is_tuple() ? args.items() : List{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t k = i + 1;
    while (k < fmt.size() && std::strchr("-+ #0123456789.", fmt[k])) ++k;
    if (k >= fmt.size()) throw Error("incomplete format");
    const char conv = fmt[k];
    const std::string spec = fmt.substr(i + 1, k - i - 1);
    i = k;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) throw Error("not enough arguments for format string");
    const Value& v = values[next++];
    if (conv == 's' || conv == 'r') {
      if (!spec.empty()) throw Error("printf-style width and flags on %s are not supported");
      out += conv == 's' ? to_str(v) : to_repr(v);
    } else if (std::strchr("dieEfFgG", conv)) {
      out += number_spec(spec, conv, v);
    } else {
      throw Error(cat({"unsupported format character '", std::string(1, conv), "'"}));
    }
  }
  if (next < values.size()) throw Error("not all arguments converted during string formatting");
  return out;
}

}  // namespace kvscope::jinja
