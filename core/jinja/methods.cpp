// The methods templates call on values: str's (strip, split, startswith, format, ...) and
// dict's (items, keys, values, get). The sandbox is immutable: mutating methods (append,
// pop, update, ...) raise, as ImmutableSandboxedEnvironment's do.
#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "jinja/error.h"
#include "jinja/format.h"
#include "jinja/interpreter.h"
#include "jinja/text.h"
#include "jinja/utf8.h"

namespace kvscope::jinja {

namespace {

std::optional<std::string> opt_str(const Args& a, size_t i, const char* name) {
  const Value v = a.get(i, name, Value(None{}));
  if (v.is_none()) return std::nullopt;
  if (!v.is_string()) throw Error(std::string(name) + " must be str or None, not " + v.type_name());
  return v.str();
}

Value strings(const std::vector<std::string>& parts) {
  List out;
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  if (affix.is_list()) {
    for (const auto& a : affix.items())
      if (affix_match(s, a, prefix)) return true;
    return false;
  }
  if (!affix.is_string()) throw Error("startswith/endswith takes a str or a tuple of str");
  const std::string& x = affix.str();
  if (x.size() > s.size()) return false;
  return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
}

Value string_method(Interpreter& in, const std::string& s, const std::string& name, Args& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const auto chars = opt_str(a, 0, "chars");
    return Value(py_strip(s, name != "rstrip", name != "lstrip", chars ? &*chars : nullptr));
  }
  if (name == "split" || name == "rsplit") {
    const auto sep = opt_str(a, 0, "sep");
    if (sep && sep->empty()) throw Error("empty separator");
    const long max = static_cast<long>(a.get(1, "maxsplit", Value(int64_t{-1})).as_int());
    return strings(name == "split" ? py_split(s, sep ? &*sep : nullptr, max)
                                   : py_rsplit(s, sep ? &*sep : nullptr, max));
  }
  if (name == "splitlines") return strings(py_splitlines(s));
  if (name == "startswith" || name == "endswith")
    return Value(affix_match(s, require_defined(a.get(0, "prefix")), name == "startswith"));
  if (name == "upper") return Value(ascii_upper(s));
  if (name == "lower") return Value(ascii_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "replace") {
    const std::string out =
        py_replace(s, to_str(require_defined(a.get(0, "old"))), to_str(require_defined(a.get(1, "new"))),
                   static_cast<long>(a.get(2, "count", Value(int64_t{-1})).as_int()));
    in.check_string(out.size());
    return Value(out);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    const std::string sub = to_str(require_defined(a.get(0, "sub")));
    if (name == "count") {
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos && !sub.empty(); p = s.find(sub, p + sub.size())) ++n;
      return Value(sub.empty() ? static_cast<int64_t>(utf8_length(s)) + 1 : n);
    }
    const size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos && name == "index") throw Error("substring not found");
    return Value(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(utf8_length(s.substr(0, p))));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const auto& item : iterate(require_defined(a.get(0, "iterable")))) {
      if (!item.is_string()) throw Error("sequence item: expected str instance, " + item.type_name() + " found");
      out += (first ? "" : s) + item.str();
      first = false;
      in.check_string(out.size());
    }
    return Value(out);
  }
  if (name == "format") {
    const std::string out = py_format(s, a);
    in.check_string(out.size());
    return Value(out);
  }
  auto all = [&](int (*pred)(int)) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; });
  };
  if (name == "isdigit") return Value(all(::isdigit));
  if (name == "isalpha") return Value(all(::isalpha));
  if (name == "isalnum") return Value(all(::isalnum));
  if (name == "isspace") return Value(all(::isspace));
  if (name == "isupper") return Value(s != ascii_lower(s) && s == ascii_upper(s));
  if (name == "islower") return Value(s != ascii_upper(s) && s == ascii_lower(s));
  throw Error("internal: unknown str method " + name);
}

Value dict_method(const Value& d, const std::string& name, Args& a) {
  if (name == "get") {
    const Value* v = d.find(require_defined(a.get(0, "key")));
    return v ? *v : a.get(1, "default", Value(None{}));
  }
  List out;
  const SeqKind kind = name == "keys" ? SeqKind::KeysView : name == "values" ? SeqKind::ValuesView : SeqKind::ItemsView;
  for (const auto& [k, v] : d.entries()) {
    if (name == "keys")
      out.push_back(k);
    else if (name == "values")
      out.push_back(v);
    else
      out.push_back(Value::list({k, v}, true));
  }
  return Value::seq(std::move(out), kind);
}

const std::unordered_set<std::string> kStrMethods = {
    "strip",  "lstrip",  "rstrip",     "split",   "rsplit",  "splitlines", "startswith", "endswith", "upper",
    "lower",  "title",   "capitalize", "replace", "find",    "rfind",      "index",      "count",    "join",
    "format", "isdigit", "isalpha",    "isalnum", "isspace", "isupper",    "islower"};
const std::unordered_set<std::string> kDictMethods = {"get", "items", "keys", "values"};
const std::unordered_set<std::string> kMutating = {"append",  "extend", "insert",  "pop",    "remove",
                                                   "clear",   "sort",   "reverse", "update", "setdefault",
                                                   "popitem", "add",    "discard"};

}  // namespace

Value find_method(Interpreter& in, const Value& obj, const std::string& name) {
  const bool known = (obj.is_string() && kStrMethods.count(name)) || (obj.is_dict() && kDictMethods.count(name));
  if (known) {
    Interpreter* interp = &in;
    return Value::function(name, [interp, obj, name](Args& a) {
      return obj.is_string() ? string_method(*interp, obj.str(), name, a) : dict_method(obj, name, a);
    });
  }
  if ((obj.is_list() || obj.is_dict()) && kMutating.count(name)) {
    const std::string type = obj.type_name();
    return Value::function(name, [type, name](Args&) -> Value {
      throw Error("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
    });
  }
  return Value::undefined(cat({"'", obj.type_name(), " object' has no attribute '", name, "'"}));
}

}  // namespace kvscope::jinja
