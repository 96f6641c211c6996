#include "jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "jinja/error.h"
#include "jinja/utf8.h"

namespace kvscope::jinja {

Value Value::list(List items, bool tuple) {
  Value x;
  x.v = std::make_shared<ListBox>(ListBox{std::move(items), tuple ? SeqKind::Tuple : SeqKind::List});
  return x;
}

Value Value::seq(List items, SeqKind kind) {
  Value x;
  x.v = std::make_shared<ListBox>(ListBox{std::move(items), kind});
  return x;
}

Value Value::dict(Dict items, bool is_namespace) {
  Value x;
  x.v = std::make_shared<DictBox>(DictBox{std::move(items), is_namespace});
  return x;
}

Value Value::function(std::string name, Function fn) {
  Value x;
  x.v = std::make_shared<FunctionBox>(FunctionBox{std::move(name), std::move(fn)});
  return x;
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v);
  if (is_int()) return static_cast<double>(std::get<int64_t>(v));
  if (is_bool()) return std::get<bool>(v) ? 1.0 : 0.0;
  require_defined(*this);
  throw Error(cat({"a number is required, not '", type_name(), "'"}));
}

int64_t Value::as_int() const {
  if (is_int()) return std::get<int64_t>(v);
  if (is_bool()) return std::get<bool>(v) ? 1 : 0;
  require_defined(*this);
  throw Error(cat({"'", type_name(), "' object cannot be interpreted as an integer"}));
}

int64_t Value::float_to_int(double d) {
  if (!(d > -9.2233720368547758e18 && d < 9.2233720368547758e18))
    throw Error("cannot convert float " + float_repr(d) + " to a 64-bit integer");
  return static_cast<int64_t>(d);
}

const std::string& Value::str() const {
  if (!is_string()) throw Error(cat({"a str is required, not '", type_name(), "'"}));
  return std::get<std::string>(v);
}

std::string Value::type_name() const {
  static const char* names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list", "dict", "function"};
  if (is_list()) {
    static const char* seq_names[] = {"list", "tuple", "generator", "dict_items", "dict_keys", "dict_values"};
    return seq_names[static_cast<int>(seq_kind())];
  }
  if (is_dict() && dict_box().is_namespace) return "Namespace";
  return names[v.index()];
}

const Value* Value::find(const Value& key) const {
  for (const auto& [k, val] : entries())
    if (equals(k, key)) return &val;
  return nullptr;
}

const Value& require_defined(const Value& v) {
  if (v.is_undefined()) {
    const auto& hint = std::get<Undefined>(v.v).hint;
    throw Error(hint.empty() ? std::string("undefined value") : hint);
  }
  return v;
}

bool truthy(const Value& v) {
  if (v.is_undefined() || v.is_none()) return false;
  if (v.is_bool()) return std::get<bool>(v.v);
  if (v.is_int()) return std::get<int64_t>(v.v) != 0;
  if (v.is_float()) return std::get<double>(v.v) != 0.0;
  if (v.is_string()) return !v.str().empty();
  if (v.is_list()) return v.seq_kind() == SeqKind::Generator || !v.items().empty();
  if (v.is_dict()) return v.dict_box().is_namespace || !v.entries().empty();
  return true;
}

namespace {

bool dict_equals(const Value& a, const Value& b) {
  if (a.entries().size() != b.entries().size()) return false;
  for (const auto& [k, val] : a.entries()) {
    const Value* other = b.find(k);
    if (!other || !equals(val, *other)) return false;
  }
  return true;
}

bool list_equals(const Value& a, const Value& b) {
  if (!a.is_plain_seq()) return &a.list_box() == &b.list_box();
  if (a.seq_kind() != b.seq_kind() || a.items().size() != b.items().size()) return false;
  for (size_t i = 0; i < a.items().size(); ++i)
    if (!equals(a.items()[i], b.items()[i])) return false;
  return true;
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.v.index() != b.v.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.str() == b.str();
  if (a.is_list()) return list_equals(a, b);
  if (a.is_dict()) return a.dict_box().is_namespace ? &a.dict_box() == &b.dict_box() : dict_equals(a, b);
  return &a.fn() == &b.fn();
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less(x[i], y[i])) return true;
      if (less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  throw Error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += cat({".", digits.substr(1)});
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) return out + "0." + std::string(-exp - 1, '0') + digits;
  if (static_cast<int>(digits.size()) <= exp + 1)
    return out + digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  return out + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
}

namespace {

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string list_repr(const Value& v) {
  if (v.seq_kind() == SeqKind::Generator) return "<generator object>";
  if (!v.is_plain_seq()) {
    std::string out = cat({v.type_name(), "(["});
    for (size_t i = 0; i < v.items().size(); ++i) out += cat({i ? ", " : "", to_repr(v.items()[i])});
    return out + "])";
  }
  std::string out = v.is_tuple() ? "(" : "[";
  for (size_t i = 0; i < v.items().size(); ++i) out += (i ? ", " : "") + to_repr(v.items()[i]);
  if (v.is_tuple() && v.items().size() == 1) out += ",";
  return out + (v.is_tuple() ? ")" : "]");
}

std::string dict_repr(const Value& v) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, val] : v.entries()) {
    out += (first ? "" : ", ") + to_repr(k) + ": " + to_repr(val);
    first = false;
  }
  return out + "}";
}

}  // namespace

std::string to_repr(const Value& v) {
  if (v.is_string()) return string_repr(v.str());
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_none()) return "None";
  if (v.is_bool()) return std::get<bool>(v.v) ? "True" : "False";
  if (v.is_int()) return std::to_string(std::get<int64_t>(v.v));
  if (v.is_float()) return float_repr(std::get<double>(v.v));
  if (v.is_string()) return v.str();
  if (v.is_list()) return list_repr(v);
  if (v.is_dict()) return v.dict_box().is_namespace ? "<Namespace " + dict_repr(v) + ">" : dict_repr(v);
  return "<function " + v.fn().name + ">";
}

List iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) {
    if (v.seq_kind() != SeqKind::Generator) return v.items();
    if (v.list_box().consumed) return {};
    v.list_box().consumed = true;
    return v.items();
  }
  if (v.is_string()) {
    List out;
    for (auto& c : utf8_chars(v.str())) out.emplace_back(std::move(c));
    return out;
  }
  if (v.is_dict() && !v.dict_box().is_namespace) {
    List out;
    for (const auto& [k, val] : v.entries()) out.push_back(k);
    return out;
  }
  throw Error("'" + v.type_name() + "' object is not iterable");
}

int64_t length(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(utf8_length(v.str()));
  if (v.is_list() && v.seq_kind() != SeqKind::Generator) return static_cast<int64_t>(v.items().size());
  if (v.is_dict() && !v.dict_box().is_namespace) return static_cast<int64_t>(v.entries().size());
  throw Error("object of type '" + v.type_name() + "' has no len()");
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(None{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (const auto& [k, e] : j.items()) items.emplace_back(Value(k), from_json(e));
      return Value::dict(std::move(items));
    }
    default:
      throw Error("unsupported JSON value");
  }
}

Value Args::get(size_t i, const std::string& name, Value fallback) const {
  if (i < positional.size()) return positional[i];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return fallback;
}

bool Args::has(size_t i, const std::string& name) const {
  if (i < positional.size()) return true;
  for (const auto& [k, v] : keyword)
    if (k == name) return true;
  return false;
}

}  // namespace kvscope::jinja
