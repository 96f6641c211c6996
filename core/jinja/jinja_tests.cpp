// The tests of `x is name`: jinja2's built-in tests as the sandbox offers them.
#include <cctype>
#include <unordered_map>

#include "jinja/error.h"
#include "jinja/interpreter.h"

namespace kvscope::jinja {

namespace {

const Value& arg0(const Args& a) {
  if (a.positional.empty()) throw Error("test requires an argument");
  return a.positional[0];
}

bool t_defined(Interpreter&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, Args&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, Args&) { return v.is_bool() && v.as_int(); }
bool t_false(Interpreter&, const Value& v, Args&) { return v.is_bool() && !v.as_int(); }
bool t_integer(Interpreter&, const Value& v, Args&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, Args&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, Args&) { return v.is_dict() && !v.dict_box().is_namespace; }
bool t_callable(Interpreter&, const Value& v, Args&) { return v.is_function(); }
bool t_iterable(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.dict_box().is_namespace);
}
bool t_sequence(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_plain_seq() || (v.is_dict() && !v.dict_box().is_namespace);
}
bool t_eq(Interpreter&, const Value& v, Args& a) { return equals(v, arg0(a)); }
bool t_ne(Interpreter&, const Value& v, Args& a) { return !equals(v, arg0(a)); }
bool t_lt(Interpreter&, const Value& v, Args& a) { return less(require_defined(v), require_defined(arg0(a))); }
bool t_gt(Interpreter&, const Value& v, Args& a) { return less(require_defined(arg0(a)), require_defined(v)); }
bool t_le(Interpreter& in, const Value& v, Args& a) { return !t_gt(in, v, a); }
bool t_ge(Interpreter& in, const Value& v, Args& a) { return !t_lt(in, v, a); }
bool t_in(Interpreter&, const Value& v, Args& a) { return contains(arg0(a), v); }

bool t_sameas(Interpreter&, const Value& v, Args& a) {
  const Value& o = arg0(a);
  if (v.v.index() != o.v.index()) return false;
  if (v.is_none() || v.is_undefined() || v.is_bool() || v.is_int()) return equals(v, o);
  if (v.is_list()) return &v.items() == &o.items();
  if (v.is_dict()) return &v.dict_box() == &o.dict_box();
  return false;
}

int64_t int_of(const Value& v) {
  if (!v.is_int() && !v.is_bool()) throw Error("test requires an integer, not " + v.type_name());
  return v.as_int();
}

bool t_odd(Interpreter&, const Value& v, Args&) { return int_of(require_defined(v)) % 2 != 0; }
bool t_even(Interpreter&, const Value& v, Args&) { return int_of(require_defined(v)) % 2 == 0; }
bool t_divisibleby(Interpreter&, const Value& v, Args& a) {
  const int64_t d = int_of(arg0(a));
  if (d == 0) throw Error("integer modulo by zero");
  return int_of(require_defined(v)) % d == 0;
}

bool t_lower(Interpreter&, const Value& v, Args&) {
  const std::string s = to_str(v);
  bool cased = false;
  for (char c : s) {
    if (std::isupper(static_cast<unsigned char>(c))) return false;
    cased = cased || std::islower(static_cast<unsigned char>(c));
  }
  return cased;
}

bool t_upper(Interpreter&, const Value& v, Args&) {
  const std::string s = to_str(v);
  bool cased = false;
  for (char c : s) {
    if (std::islower(static_cast<unsigned char>(c))) return false;
    cased = cased || std::isupper(static_cast<unsigned char>(c));
  }
  return cased;
}

bool t_filter(Interpreter&, const Value& v, Args&) { return v.is_string() && find_filter(v.str()); }
bool t_test(Interpreter&, const Value& v, Args&) { return v.is_string() && find_test(v.str()); }
bool t_escaped(Interpreter&, const Value&, Args&) { return false; }

}  // namespace

TestFn find_test(const std::string& name) {
  static const std::unordered_map<std::string, TestFn> tests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"callable", t_callable},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"equalto", t_eq},
      {"eq", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"le", t_le},
      {"<=", t_le},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"lower", t_lower},
      {"upper", t_upper},
      {"filter", t_filter},
      {"test", t_test},
      {"escaped", t_escaped},
  };
  auto it = tests.find(name);
  return it == tests.end() ? nullptr : it->second;
}

}  // namespace kvscope::jinja
