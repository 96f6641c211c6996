#pragma once
// A template value with Python's semantics: none, bool, int, float, str, list/tuple, dict
// (insertion-ordered), callable, and jinja2's default Undefined (prints as '', iterates as
// empty, fails on any other use). Lists and dicts are shared, never mutated after creation
// (the sandbox is immutable), except a namespace()'s dict, which `set ns.x = ...` writes.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kvscope::jinja {

struct Value;
struct Args;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<Value, Value>>;
using Function = std::function<Value(Args&)>;

struct Undefined {
  std::string hint;  // what was looked up, for the error message
};
struct None {};
// Python's sequences: list and tuple, and the lazy ones jinja2's filters and dict's methods
// return, which differ in what they allow: a generator (map, select, ...) is always true, has
// no len(), cannot be indexed or serialized and is used up by one iteration; a dict view
// (items(), keys(), values()) has a len() but cannot be indexed or serialized.
enum class SeqKind { List, Tuple, Generator, ItemsView, KeysView, ValuesView };
struct ListBox {
  List items;
  SeqKind kind = SeqKind::List;
  bool consumed = false;  // a generator, once iterated
};
struct DictBox {
  Dict items;
  bool is_namespace = false;
};
struct FunctionBox {
  std::string name;
  Function fn;
};

struct Value {
  bool markup = false;  // a Markup string (|safe, |escape): `+` with it HTML-escapes the other side
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<ListBox>, std::shared_ptr<DictBox>,
               std::shared_ptr<FunctionBox>>
      v;

  Value() : v(Undefined{}) {}
  Value(None) : v(None{}) {}
  Value(bool b) : v(b) {}
  Value(int i) : v(int64_t{i}) {}
  Value(int64_t i) : v(i) {}
  Value(double d) : v(d) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(const char* s) : v(std::string(s)) {}
  static Value undefined(std::string hint) {
    Value x;
    x.v = Undefined{std::move(hint)};
    return x;
  }
  static Value list(List items, bool tuple = false);
  static Value seq(List items, SeqKind kind);
  static Value dict(Dict items, bool is_namespace = false);
  static Value function(std::string name, Function fn);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v); }
  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<ListBox>>(v); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<DictBox>>(v); }
  bool is_function() const { return std::holds_alternative<std::shared_ptr<FunctionBox>>(v); }

  const std::string& str() const;  // Error for a non-string
  const List& items() const { return std::get<std::shared_ptr<ListBox>>(v)->items; }
  ListBox& list_box() const { return *std::get<std::shared_ptr<ListBox>>(v); }
  SeqKind seq_kind() const { return list_box().kind; }
  bool is_tuple() const { return is_list() && seq_kind() == SeqKind::Tuple; }
  // list or tuple: what can be indexed, sliced, added and serialized
  bool is_plain_seq() const { return is_list() && (seq_kind() == SeqKind::List || seq_kind() == SeqKind::Tuple); }
  DictBox& dict_box() const { return *std::get<std::shared_ptr<DictBox>>(v); }
  const Dict& entries() const { return dict_box().items; }
  const FunctionBox& fn() const { return *std::get<std::shared_ptr<FunctionBox>>(v); }
  double as_double() const;  // int, float or bool
  int64_t as_int() const;    // int or bool
  // Python's int(float): truncation; Error for nan, inf and what int64 cannot hold.
  static int64_t float_to_int(double d);

  // Python's type name, for error messages ("str", "dict", "NoneType", "Undefined", ...).
  std::string type_name() const;
  // The dict entry for key, or nullptr.
  const Value* find(const Value& key) const;
};

// Throws Error("'x' is undefined") for an Undefined: every use but printing, iterating,
// truth tests, `is defined` and default() must go through it.
const Value& require_defined(const Value& v);

bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
// Python's a < b for numbers, strings and lists; throws Error for other pairs.
bool less(const Value& a, const Value& b);
// str(v): what {{ v }} prints.
std::string to_str(const Value& v);
// repr(v): how v prints inside a list or dict.
std::string to_repr(const Value& v);
std::string float_repr(double d);
// The values a for-loop visits: list items, dict keys, string characters; empty for Undefined.
List iterate(const Value& v);
int64_t length(const Value& v);

Value from_json(const nlohmann::ordered_json& j);

struct Args {
  List positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The positional i, else the keyword name, else the default (consumed keywords are marked).
  Value get(size_t i, const std::string& name, Value fallback = Value()) const;
  bool has(size_t i, const std::string& name) const;
};

}  // namespace kvscope::jinja
