// The string and scalar filters, tojson as transformers defines it, and the filter registry
// (the sequence filters are in filters_seq.cpp).
#include <cmath>
#include <unordered_map>

#include "jinja/error.h"
#include "jinja/filters_impl.h"
#include "jinja/format.h"
#include "jinja/json_dump.h"
#include "jinja/text.h"
#include "jinja/utf8.h"

namespace kvscope::jinja {

namespace {

Value f_default(Interpreter&, const Value& v, Args& a) {
  const bool boolean = truthy(a.get(1, "boolean", Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return a.get(0, "default_value", Value(""));
  return v;
}

Value f_length(Interpreter&, const Value& v, Args&) { return Value(length(v)); }
Value as_markup(std::string s) {
  Value out(std::move(s));
  out.markup = true;
  return out;
}

Value f_string(Interpreter&, const Value& v, Args&) { return v.markup ? v : Value(to_str(v)); }
Value f_safe(Interpreter&, const Value& v, Args&) { return v.markup ? v : as_markup(to_str(v)); }
Value f_lower(Interpreter&, const Value& v, Args&) { return Value(ascii_lower(to_str(v))); }
Value f_upper(Interpreter&, const Value& v, Args&) { return Value(ascii_upper(to_str(v))); }
Value f_capitalize(Interpreter&, const Value& v, Args&) { return Value(py_capitalize(to_str(v))); }

Value f_trim(Interpreter&, const Value& v, Args& a) {
  const Value chars = a.get(0, "chars", Value(None{}));
  const std::string c = chars.is_string() ? chars.str() : "";
  return Value(py_strip(to_str(v), true, true, chars.is_string() ? &c : nullptr));
}

// jinja2's title: each run after `-`, whitespace or an opening bracket starts a word.
Value f_title(Interpreter&, const Value& v, Args&) {
  const std::string s = to_str(v);
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const bool sep = c == '-' || is_py_space(c) || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep)
      out += c;
    else
      out += static_cast<char>(word_start ? std::toupper(static_cast<unsigned char>(c))
                                          : std::tolower(static_cast<unsigned char>(c)));
    word_start = sep;
  }
  return Value(out);
}

Value f_replace(Interpreter& in, const Value& v, Args& a) {
  const Value from = a.get(0, "old"), to = a.get(1, "new"), count = a.get(2, "count", Value(None{}));
  const std::string out = py_replace(to_str(v), to_str(require_defined(from)), to_str(require_defined(to)),
                                     count.is_int() ? static_cast<long>(count.as_int()) : -1);
  in.check_string(out.size());
  return Value(out);
}

Value f_tojson(Interpreter&, const Value& v, Args& a) {
  JsonDumpOptions o;
  o.ensure_ascii = truthy(a.get(0, "ensure_ascii", Value(false)));
  const Value indent = a.get(1, "indent", Value(None{}));
  const Value seps = a.get(2, "separators", Value(None{}));
  o.sort_keys = truthy(a.get(3, "sort_keys", Value(false)));
  if (indent.is_int()) {
    o.has_indent = true;
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  } else if (indent.is_string()) {
    o.has_indent = true;
    o.indent = indent.str();
  }
  o.item_sep = o.has_indent ? "," : ", ";
  if (seps.is_list() && seps.items().size() == 2 && seps.items()[0].is_string() && seps.items()[1].is_string()) {
    o.item_sep = seps.items()[0].str();
    o.key_sep = seps.items()[1].str();
  }
  return Value(json_dumps(v, o));
}

Value f_int(Interpreter&, const Value& v, Args& a) {
  const Value fallback = a.get(0, "default", Value(int64_t{0}));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return Value(Value::float_to_int(v.as_double()));
  if (v.is_string()) {
    const std::string s = py_strip(v.str(), true, true);
    try {
      size_t used = 0;
      const long long n = std::stoll(s, &used, 10);
      if (used == s.size()) return Value(static_cast<int64_t>(n));
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(Value::float_to_int(d));
    } catch (const std::exception&) {}
  }
  return fallback;
}

Value f_float(Interpreter&, const Value& v, Args& a) {
  const Value fallback = a.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = py_strip(v.str(), true, true);
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {}
  }
  return fallback;
}

Value f_abs(Interpreter&, const Value& v, Args&) {
  require_defined(v);
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_number() && v.as_int() == INT64_MIN) throw Error("integer overflow (kvscope's integers are 64-bit)");
  if (v.is_number()) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
  throw Error("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(Interpreter&, const Value& v, Args& a) {
  const int64_t precision = a.get(0, "precision", Value(int64_t{0})).as_int();
  const std::string method = to_str(a.get(1, "method", Value("common")));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = require_defined(v).as_double() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value(r / scale);
}

Value f_indent(Interpreter& in, const Value& v, Args& a) {
  const Value width = a.get(0, "width", Value(int64_t{4}));
  const bool first = truthy(a.get(1, "first", Value(false)));
  const bool blank = truthy(a.get(2, "blank", Value(false)));
  const std::string pad =
      width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  const auto lines = py_splitlines(to_str(v) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    if (i && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
    in.check_string(out.size());
  }
  return Value(first ? pad + out : out);
}

Value f_escape(Interpreter&, const Value& v, Args&) { return v.markup ? v : as_markup(html_escape(to_str(v))); }

// jinja2's format filter: printf-style, the arguments as a tuple.
Value f_format(Interpreter& in, const Value& v, Args& a) {
  if (!a.keyword.empty()) throw Error("format filter: keyword arguments are not supported");
  const std::string out = percent_format(to_str(v), Value::list(a.positional, true));
  in.check_string(out.size());
  return Value(out);
}

Value f_wordcount(Interpreter&, const Value& v, Args&) {
  return Value(static_cast<int64_t>(py_split(to_str(v), nullptr, -1).size()));
}

Value f_attr(Interpreter& in, const Value& v, Args& a) {
  return get_attr(in, require_defined(v), to_str(a.get(0, "name")));
}

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::unordered_map<std::string, FilterFn> filters = {
      {"default", f_default},
      {"d", f_default},
      {"length", f_length},
      {"count", f_length},
      {"string", f_string},
      {"safe", f_safe},
      {"lower", f_lower},
      {"upper", f_upper},
      {"capitalize", f_capitalize},
      {"trim", f_trim},
      {"title", f_title},
      {"replace", f_replace},
      {"tojson", f_tojson},
      {"int", f_int},
      {"float", f_float},
      {"abs", f_abs},
      {"round", f_round},
      {"indent", f_indent},
      {"escape", f_escape},
      {"e", f_escape},
      {"wordcount", f_wordcount},
      {"attr", f_attr},
      {"first", f_first},
      {"last", f_last},
      {"join", f_join},
      {"list", f_list},
      {"items", f_items},
      {"dictsort", f_dictsort},
      {"map", f_map},
      {"select", f_select},
      {"reject", f_reject},
      {"selectattr", f_selectattr},
      {"rejectattr", f_rejectattr},
      {"reverse", f_reverse},
      {"sort", f_sort},
      {"unique", f_unique},
      {"sum", f_sum},
      {"min", f_min},
      {"max", f_max},
      {"batch", f_batch},
      {"format", f_format},
  };
  auto it = filters.find(name);
  return it == filters.end() ? nullptr : it->second;
}

}  // namespace kvscope::jinja
