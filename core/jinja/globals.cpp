// The global functions a chat template can call: jinja2's range, dict and namespace, and
// transformers' raise_exception and strftime_now.
#include <ctime>

#include "jinja/error.h"
#include "jinja/interpreter.h"

namespace kvscope::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // the sandbox's MAX_RANGE

Value range_fn(Interpreter& in, Args& a) {
  for (const auto& v : a.positional)
    if (!v.is_int() && !v.is_bool()) throw Error("'" + v.type_name() + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1)
    stop = a.positional[0].as_int();
  else if (a.positional.size() >= 2) {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (a.positional.size() >= 3) step = a.positional[2].as_int();
  } else {
    throw Error("range expected at least 1 argument, got 0");
  }
  if (step == 0) throw Error("range() arg 3 must not be zero");
  const int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                 : (start > stop ? (start - stop - step - 1) / -step : 0);
  if (count > kMaxRange) throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  in.count_iterations(count);
  List out;
  for (int64_t i = 0; i < count; ++i) out.emplace_back(start + i * step);
  return Value::list(std::move(out));
}

Value make_dict(const Args& a, bool is_namespace) {
  Dict items;
  if (!a.positional.empty()) {
    const Value& init = a.positional[0];
    if (!init.is_dict()) throw Error("dict() argument must be a mapping");
    items = init.entries();
  }
  for (const auto& [k, v] : a.keyword) {
    if (is_namespace && !k.empty() && k[0] == '_')
      throw Error("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k + "'.");
    bool replaced = false;
    for (auto& [ek, ev] : items)
      if (ek.is_string() && ek.str() == k) {
        ev = v;
        replaced = true;
      }
    if (!replaced) items.emplace_back(Value(k), v);
  }
  return Value::dict(std::move(items), is_namespace);
}

std::tm local_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

}  // namespace

void add_globals(Interpreter& in, Scope& scope) {
  Interpreter* interp = &in;
  scope.vars["range"] = Value::function("range", [interp](Args& a) { return range_fn(*interp, a); });
  scope.vars["dict"] = Value::function("dict", [](Args& a) { return make_dict(a, false); });
  scope.vars["namespace"] = Value::function("namespace", [](Args& a) { return make_dict(a, true); });
  scope.vars["raise_exception"] =
      Value::function("raise_exception", [](Args& a) -> Value { throw Error(to_str(a.get(0, "message"))); });
  scope.vars["strftime_now"] = Value::function("strftime_now", [interp](Args& a) {
    const std::string fmt = to_str(require_defined(a.get(0, "format")));
    const std::tm tm = interp->options().now ? *interp->options().now : local_now();
    if (fmt.empty()) return Value("");
    std::string buf(fmt.size() * 4 + 64, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    buf.resize(n);
    return Value(buf);
  });
}

}  // namespace kvscope::jinja
