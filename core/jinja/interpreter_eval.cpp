#include "jinja/error.h"
#include "jinja/interpreter.h"

namespace kvscope::jinja {

Value Interpreter::eval(const Node& node, const ScopePtr& scope) {
  Depth depth(*this);
  if ((++ticks_ & 255) == 0) check_time();
  return eval_inner(node, scope);
}

Value Interpreter::eval_inner(const Node& node, const ScopePtr& scope) {
  const auto& k = node.kids;
  switch (node.kind) {
    case NodeKind::Const:
      return &node == filter_input_node_ ? filter_input_ : node.value;
    case NodeKind::Name: {
      const Value* v = scope->lookup(node.name);
      return v ? *v : Value::undefined("'" + node.name + "' is undefined");
    }
    case NodeKind::Attr:
      return get_attr(*this, require_defined(eval(*k[0], scope)), node.name);
    case NodeKind::Item:
      return get_item(*this, require_defined(eval(*k[0], scope)), eval(*k[1], scope));
    case NodeKind::Slice: {
      auto part = [&](const NodePtr& n) { return n ? eval(*n, scope) : Value(None{}); };
      return slice(require_defined(eval(*k[0], scope)), part(k[1]), part(k[2]), part(k[3]));
    }
    case NodeKind::Call:
      return eval_call(node, scope);
    case NodeKind::Filter:
      return eval_filter(node, scope);
    case NodeKind::Test:
      return Value(eval_test(node, scope));
    case NodeKind::Not:
      return Value(!truthy(eval(*k[0], scope)));
    case NodeKind::Neg:
    case NodeKind::Pos: {
      const Value v = require_defined(eval(*k[0], scope));
      if (!v.is_number())
        throw Error("bad operand type for unary " + std::string(node.kind == NodeKind::Neg ? "-" : "+") + ": '" +
                    v.type_name() + "'");
      if (node.kind == NodeKind::Pos) return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return Value(-v.as_double());
      if (v.as_int() == INT64_MIN) throw Error("integer overflow (kvscope's integers are 64-bit)");
      return Value(-v.as_int());
    }
    case NodeKind::Binary:
      return binary_op(*this, node.name, eval(*k[0], scope), eval(*k[1], scope));
    case NodeKind::And: {
      Value a = eval(*k[0], scope);
      return truthy(a) ? eval(*k[1], scope) : a;
    }
    case NodeKind::Or: {
      Value a = eval(*k[0], scope);
      return truthy(a) ? a : eval(*k[1], scope);
    }
    case NodeKind::Compare:
      return eval_compare(node, scope);
    case NodeKind::Concat: {
      std::string s;
      for (const auto& kid : k) {
        s += to_str(eval(*kid, scope));
        check_string(s.size());
      }
      return Value(s);
    }
    case NodeKind::CondExpr:
      if (truthy(eval(*k[0], scope))) return eval(*k[1], scope);
      return k[2] ? eval(*k[2], scope)
                  : Value::undefined("the inline if expression evaluated to false and no else section was defined");
    default:
      return eval_collection(node, scope);
  }
}

Value Interpreter::eval_collection(const Node& node, const ScopePtr& scope) {
  if (node.kind == NodeKind::ListLit || node.kind == NodeKind::TupleLit) {
    List items;
    for (const auto& kid : node.kids) items.push_back(eval(*kid, scope));
    return Value::list(std::move(items), node.kind == NodeKind::TupleLit);
  }
  if (node.kind == NodeKind::DictLit) {
    Dict items;
    for (size_t i = 0; i + 1 < node.kids.size(); i += 2) {
      Value key = eval(*node.kids[i], scope);
      Value val = eval(*node.kids[i + 1], scope);
      bool replaced = false;
      for (auto& [ek, ev] : items)
        if (equals(ek, key)) {
          ev = val;
          replaced = true;
        }
      if (!replaced) items.emplace_back(std::move(key), std::move(val));
    }
    return Value::dict(std::move(items));
  }
  throw Error("internal: not an expression");
}

Args Interpreter::eval_args(const Node& node, const ScopePtr& scope, size_t first_kid) {
  Args args;
  for (size_t i = first_kid; i < node.kids.size(); ++i) args.positional.push_back(eval(*node.kids[i], scope));
  for (const auto& [name, expr] : node.kwargs) args.keyword.emplace_back(name, eval(*expr, scope));
  return args;
}

Value Interpreter::eval_call(const Node& node, const ScopePtr& scope) {
  const Value callee = eval(*node.kids[0], scope);
  Args args = eval_args(node, scope, 1);
  return call(callee, args);
}

Value Interpreter::eval_filter(const Node& node, const ScopePtr& scope) {
  const FilterFn f = find_filter(node.name);
  if (!f) throw Error("no filter named '" + node.name + "'");
  const Value input = eval(*node.kids[0], scope);
  Args args = eval_args(node, scope, 1);
  return f(*this, input, args);
}

Value Interpreter::eval_test(const Node& node, const ScopePtr& scope) {
  const TestFn t = find_test(node.name);
  if (!t) throw Error("no test named '" + node.name + "'");
  const Value input = eval(*node.kids[0], scope);
  Args args = eval_args(node, scope, 1);
  return Value(t(*this, input, args) != node.negated);
}

Value Interpreter::eval_compare(const Node& node, const ScopePtr& scope) {
  Value left = eval(*node.kids[0], scope);
  for (size_t i = 0; i < node.names.size(); ++i) {
    Value right = eval(*node.kids[i + 1], scope);
    const std::string& op = node.names[i];
    bool ok;
    if (op == "==")
      ok = equals(left, right);
    else if (op == "!=")
      ok = !equals(left, right);
    else if (op == "in")
      ok = contains(right, left);
    else if (op == "notin")
      ok = !contains(right, left);
    else {
      require_defined(left);
      require_defined(right);
      if (op == "<")
        ok = less(left, right);
      else if (op == ">")
        ok = less(right, left);
      else if (op == "<=")
        ok = !less(right, left);
      else
        ok = !less(left, right);
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

}  // namespace kvscope::jinja
