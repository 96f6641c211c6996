// Python's arithmetic, membership, attribute/item lookup and slicing, as jinja2 exposes them.
#include <cmath>

#include "jinja/error.h"
#include "jinja/format.h"
#include "jinja/interpreter.h"
#include "jinja/text.h"
#include "jinja/utf8.h"

namespace kvscope::jinja {

namespace {

[[noreturn]] void type_error(const std::string& op, const Value& a, const Value& b) {
  throw Error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

[[noreturn]] void overflow() { throw Error("integer overflow (kvscope's integers are 64-bit)"); }

// a op b, or Error when int64 cannot hold it (Python's ints would grow).
template <typename Op>
int64_t checked(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) overflow();
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  const size_t unit = std::max<size_t>(1, seq.is_string() ? seq.str().size() : seq.items().size());
  if (n > 0 && static_cast<uint64_t>(n) > static_cast<uint64_t>(in.options().max_output_bytes) / unit)
    in.check_string(static_cast<size_t>(in.options().max_output_bytes) + 1);
  if (seq.is_string()) {
    std::string out;
    if (n > 0) in.check_string(seq.str().size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(out);
  }
  List out;
  if (n > 0) in.check_list(seq.items().size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.is_tuple());
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool as_float = a.is_float() || b.is_float() || op == "/";
  if (op == "/" || op == "//" || op == "%") {
    if (b.as_double() == 0.0) throw Error(op == "%" ? "integer modulo by zero" : "division by zero");
  }
  if (!as_float) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+")
      return Value(checked([](int64_t a, int64_t b, int64_t* o) { return __builtin_add_overflow(a, b, o); }, x, y));
    if (op == "-")
      return Value(checked([](int64_t a, int64_t b, int64_t* o) { return __builtin_sub_overflow(a, b, o); }, x, y));
    if (op == "*")
      return Value(checked([](int64_t a, int64_t b, int64_t* o) { return __builtin_mul_overflow(a, b, o); }, x, y));
    if (op == "//") return Value(floor_div(x, y));
    if (op == "%") return Value(y == -1 ? int64_t{0} : x - floor_div(x, y) * y);
    if (y >= 0) {
      r = 1;
      for (int64_t i = 0; i < y && r != 0 && !(r == 1 && (x == 1 || x == 0)); ++i)
        if (__builtin_mul_overflow(r, x, &r)) overflow();
      if (y > 0 && x == 0) r = 0;
      return Value(r);
    }
    return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "/") return Value(x / y);
  if (op == "//") return Value(std::floor(x / y));
  if (op == "%") {
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  return Value(std::pow(x, y));
}

// Markup + str (either order): the str side is HTML-escaped, as markupsafe does.
Value markup_concat(Interpreter& in, const Value& a, const Value& b) {
  const std::string x = a.markup ? a.str() : html_escape(a.str());
  const std::string y = b.markup ? b.str() : html_escape(b.str());
  in.check_string(x.size() + y.size());
  Value out(x + y);
  out.markup = true;
  return out;
}

}  // namespace

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+" && (a.markup || b.markup) && a.is_string() != b.is_string()) type_error(op, a, b);
  if (op == "+" && (a.markup || b.markup)) return markup_concat(in, a, b);
  if (op == "+" && a.is_string() && b.is_string()) {
    in.check_string(a.str().size() + b.str().size());
    return Value(a.str() + b.str());
  }
  if (op == "+" && a.is_plain_seq() && b.is_plain_seq() && a.is_tuple() == b.is_tuple()) {
    in.check_list(a.items().size() + b.items().size());
    List out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return Value::list(std::move(out), a.is_tuple());
  }
  if (op == "*" && (a.is_string() || a.is_plain_seq()) && (b.is_int() || b.is_bool())) return repeat(in, a, b.as_int());
  if (op == "*" && (b.is_string() || b.is_plain_seq()) && (a.is_int() || a.is_bool())) return repeat(in, b, a.as_int());
  if (op == "%" && a.is_string()) {
    const std::string out = percent_format(a.str(), b);
    in.check_string(out.size());
    return Value(out);
  }
  type_error(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (!item.is_string()) throw Error("'in <string>' requires string as left operand, not " + item.type_name());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& v : container.items())
      if (equals(v, item)) return true;
    return false;
  }
  if (container.is_dict() && !container.dict_box().is_namespace) return container.find(item) != nullptr;
  throw Error("argument of type '" + container.type_name() + "' is not iterable");
}

Value get_attr(Interpreter& in, const Value& obj, const std::string& name) {
  if (obj.is_dict() && obj.dict_box().is_namespace) {
    if (const Value* v = obj.find(Value(name))) return *v;
  } else if (obj.is_dict()) {
    Value method = find_method(in, obj, name);
    if (!method.is_undefined()) return method;
    if (const Value* v = obj.find(Value(name))) return *v;
  } else if (obj.is_string() || obj.is_list()) {
    Value method = find_method(in, obj, name);
    if (!method.is_undefined()) return method;
  }
  return Value::undefined(cat({"'", obj.type_name(), " object' has no attribute '", name, "'"}));
}

Value get_item(Interpreter& in, const Value& obj, const Value& key) {
  if (obj.is_dict() && !obj.dict_box().is_namespace) {
    if (const Value* v = obj.find(key)) return *v;
  } else if ((obj.is_plain_seq() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    const bool is_str = obj.is_string();
    std::vector<std::string> chars;
    if (is_str) chars = utf8_chars(obj.str());
    const auto n = static_cast<int64_t>(is_str ? chars.size() : obj.items().size());
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) return is_str ? Value(chars[static_cast<size_t>(i)]) : obj.items()[static_cast<size_t>(i)];
  }
  if (key.is_string()) return get_attr(in, obj, key.str());
  return Value::undefined(cat({"'", obj.type_name(), " object' has no element ", to_repr(key)}));
}

namespace {

int64_t slice_bound(const Value& v, int64_t n, int64_t step, bool is_start) {
  if (v.is_none() || v.is_undefined()) {
    if (step > 0) return is_start ? 0 : n;
    return is_start ? n - 1 : -1;
  }
  if (!v.is_int() && !v.is_bool()) throw Error("slice indices must be integers or None");
  int64_t i = v.as_int();
  if (i < 0) i += n;
  if (step > 0) return std::clamp<int64_t>(i, 0, n);
  return std::clamp<int64_t>(i, -1, n - 1);
}

}  // namespace

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  int64_t step = 1;
  if (!step_v.is_none() && !step_v.is_undefined()) {
    if (!step_v.is_int()) throw Error("slice indices must be integers or None");
    step = step_v.as_int();
  }
  if (step == 0) throw Error("slice step cannot be zero");
  if (step == INT64_MIN) step = -INT64_MAX;  // the same slice, and its negation exists
  if (!obj.is_string() && !obj.is_plain_seq())
    throw Error(cat({"'", obj.type_name(), "' object is not subscriptable"}));
  std::vector<std::string> chars;
  if (obj.is_string()) chars = utf8_chars(obj.str());
  const auto n = static_cast<int64_t>(obj.is_string() ? chars.size() : obj.items().size());
  const int64_t b = slice_bound(start, n, step, true), e = slice_bound(stop, n, step, false);
  std::string s;
  List l;
  for (int64_t i = b; step > 0 ? i < e : i > e;) {
    if (obj.is_string())
      s += chars[static_cast<size_t>(i)];
    else
      l.push_back(obj.items()[static_cast<size_t>(i)]);
    if (step > 0 ? e - i <= step : i - e <= -step) break;  // the next step would pass the end
    i += step;
  }
  return obj.is_string() ? Value(s) : Value::list(std::move(l), obj.is_tuple());
}

}  // namespace kvscope::jinja
