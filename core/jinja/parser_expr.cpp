#include <cstdlib>

#include "jinja/error.h"
#include "jinja/parser_impl.h"

namespace kvscope::jinja {

namespace {

bool is_tuple_end(const Token& t) {
  return t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof ||
         (t.type == Tok::Op && (t.text == ")" || t.text == "]" || t.text == "}" || t.text == "=")) ||
         (t.type == Tok::Name && t.text == "in");
}

NodePtr binary(const Parser& p, const char* op, NodePtr a, NodePtr b) {
  auto n = p.make(NodeKind::Binary);
  n->name = op;
  n->kids = {std::move(a), std::move(b)};
  return n;
}

}  // namespace

Parser::DepthGuard::DepthGuard(Parser& parser) : p(parser) {
  if (++p.depth_ > kMaxParseDepth) p.fail("template nesting too deep (limit " + std::to_string(kMaxParseDepth) + ")");
}

NodePtr Parser::parse_tuple(bool with_condexpr, bool explicit_parens) {
  std::vector<NodePtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(cur())) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple && items.size() == 1) return items[0];
  if (items.empty() && !explicit_parens) fail("expected an expression");
  auto n = make(NodeKind::TupleLit);
  n->kids = std::move(items);
  return n;
}

NodePtr Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  NodePtr expr = with_condexpr ? parse_or() : parse_or();
  if (!with_condexpr) return expr;
  while (accept_name("if")) {
    auto n = make(NodeKind::CondExpr);
    NodePtr cond = parse_or();
    NodePtr other = accept_name("else") ? parse_expression() : nullptr;
    n->kids = {cond, expr, other};
    expr = n;
  }
  return expr;
}

NodePtr Parser::parse_or() {
  NodePtr left = parse_and();
  while (accept_name("or")) {
    auto n = make(NodeKind::Or);
    n->kids = {left, parse_and()};
    left = n;
  }
  return left;
}

NodePtr Parser::parse_and() {
  NodePtr left = parse_not();
  while (accept_name("and")) {
    auto n = make(NodeKind::And);
    n->kids = {left, parse_not()};
    left = n;
  }
  return left;
}

NodePtr Parser::parse_not() {
  if (accept_name("not")) {
    DepthGuard guard(*this);
    auto n = make(NodeKind::Not);
    n->kids = {parse_not()};
    return n;
  }
  return parse_compare();
}

NodePtr Parser::parse_compare() {
  NodePtr first = parse_math1();
  auto n = make(NodeKind::Compare);
  n->kids = {first};
  while (true) {
    static const char* ops[] = {"==", "!=", "<", ">", "<=", ">="};
    std::string op;
    for (const char* o : ops)
      if (is_op(o)) op = o;
    if (!op.empty()) {
      next();
    } else if (accept_name("in")) {
      op = "in";
    } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    n->names.push_back(op);
    n->kids.push_back(parse_math1());
  }
  return n->names.empty() ? first : n;
}

NodePtr Parser::parse_math1() {
  NodePtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const char* op = is_op("+") ? "+" : "-";
    next();
    left = binary(*this, op, left, parse_concat());
  }
  return left;
}

NodePtr Parser::parse_concat() {
  NodePtr first = parse_math2();
  if (!is_op("~")) return first;
  auto n = make(NodeKind::Concat);
  n->kids = {first};
  while (accept_op("~")) n->kids.push_back(parse_math2());
  return n;
}

NodePtr Parser::parse_math2() {
  NodePtr left = parse_pow();
  while (true) {
    const char* op = is_op("*") ? "*" : is_op("/") ? "/" : is_op("//") ? "//" : is_op("%") ? "%" : nullptr;
    if (!op) return left;
    next();
    left = binary(*this, op, left, parse_pow());
  }
}

NodePtr Parser::parse_pow() {
  NodePtr left = parse_unary();
  while (accept_op("**")) left = binary(*this, "**", left, parse_unary());
  return left;
}

NodePtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  NodePtr node;
  if (is_op("-") || is_op("+")) {
    node = make(is_op("-") ? NodeKind::Neg : NodeKind::Pos);
    next();
    node->kids = {parse_unary(false)};
  } else {
    node = parse_primary();
  }
  node = parse_postfix(node);
  return with_filter ? parse_filter_expr(node) : node;
}

NodePtr Parser::parse_primary() {
  const Token t = cur();
  if (t.type == Tok::Name) {
    next();
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      auto n = make(NodeKind::Const);
      n->value = Value(t.text == "true" || t.text == "True");
      return n;
    }
    auto n = make(t.text == "none" || t.text == "None" ? NodeKind::Const : NodeKind::Name);
    if (n->kind == NodeKind::Const) n->value = Value(None{});
    n->name = t.text;
    return n;
  }
  if (t.type == Tok::String) {
    auto n = make(NodeKind::Const);
    std::string s;
    while (cur().type == Tok::String) {
      s += cur().text;
      next();
    }
    n->value = Value(s);
    return n;
  }
  if (t.type == Tok::Int || t.type == Tok::Float) {
    auto n = make(NodeKind::Const);
    next();
    if (t.type == Tok::Float)
      n->value = Value(std::strtod(t.text.c_str(), nullptr));
    else
      n->value = Value(static_cast<int64_t>(std::strtoll(t.text.c_str(), nullptr, 10)));
    return n;
  }
  if (accept_op("(")) {
    NodePtr n = parse_tuple(true, true);
    expect_op(")");
    return n;
  }
  if (is_op("[")) return parse_list();
  if (is_op("{")) return parse_dict();
  fail("unexpected '" + t.text + "'");
}

NodePtr Parser::parse_list() {
  expect_op("[");
  auto n = make(NodeKind::ListLit);
  while (!is_op("]")) {
    if (!n->kids.empty()) expect_op(",");
    if (is_op("]")) break;
    n->kids.push_back(parse_expression());
  }
  expect_op("]");
  return n;
}

NodePtr Parser::parse_dict() {
  expect_op("{");
  auto n = make(NodeKind::DictLit);
  while (!is_op("}")) {
    if (!n->kids.empty()) expect_op(",");
    if (is_op("}")) break;
    n->kids.push_back(parse_expression());
    expect_op(":");
    n->kids.push_back(parse_expression());
  }
  expect_op("}");
  return n;
}

NodePtr Parser::parse_postfix(NodePtr node) {
  while (true) {
    if (accept_op(".")) {
      auto n = make(NodeKind::Attr);
      if (cur().type != Tok::Name && cur().type != Tok::Int) fail("expected an attribute name after '.'");
      n->name = cur().text;
      next();
      n->kids = {node};
      node = n;
    } else if (is_op("[")) {
      node = parse_subscript(node);
    } else if (is_op("(")) {
      auto n = make(NodeKind::Call);
      n->kids = {node};
      parse_call_args(*n);
      node = n;
    } else {
      return node;
    }
  }
}

NodePtr Parser::parse_filter_expr(NodePtr node) {
  while (true) {
    if (is_op("|")) {
      node = parse_filter(node);
    } else if (is_name("is")) {
      node = parse_test(node);
    } else if (is_op("(")) {
      auto n = make(NodeKind::Call);
      n->kids = {node};
      parse_call_args(*n);
      node = n;
    } else {
      return node;
    }
  }
}

NodePtr Parser::parse_subscript(NodePtr node) {
  expect_op("[");
  NodePtr parts[3];
  bool slice = false;
  for (int k = 0; k < 3; ++k) {
    if (!is_op(":") && !is_op("]")) parts[k] = parse_expression();
    if (k < 2 && accept_op(":"))
      slice = true;
    else
      break;
  }
  expect_op("]");
  if (!slice && !parts[0]) fail("expected a subscript");
  auto n = make(slice ? NodeKind::Slice : NodeKind::Item);
  n->kids = {node, parts[0], parts[1], parts[2]};
  if (!slice) n->kids.resize(2);
  return n;
}

NodePtr Parser::parse_filter(NodePtr node) {
  expect_op("|");
  auto n = make(NodeKind::Filter);
  n->name = expect_name();
  while (accept_op(".")) n->name += cat({".", expect_name()});
  n->kids = {node};
  if (is_op("(")) parse_call_args(*n);
  return n;
}

NodePtr Parser::parse_test(NodePtr node) {
  next();  // is
  auto n = make(NodeKind::Test);
  n->negated = accept_name("not");
  n->name = expect_name();
  while (accept_op(".")) n->name += cat({".", expect_name()});
  n->kids = {node};
  const Token& t = cur();
  const bool arg_start = t.type == Tok::String || t.type == Tok::Int || t.type == Tok::Float ||
                         (t.type == Tok::Name && t.text != "else" && t.text != "or" && t.text != "and") ||
                         (t.type == Tok::Op && (t.text == "[" || t.text == "{"));
  if (is_op("(")) {
    parse_call_args(*n);
  } else if (arg_start) {
    if (is_name("is")) fail("You cannot chain multiple tests with is");
    n->kids.push_back(parse_postfix(parse_primary()));
  }
  return n;
}

void Parser::parse_call_args(Node& call) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
      std::string key = cur().text;
      next();
      next();
      call.kwargs.emplace_back(key, parse_expression());
    } else {
      if (!call.kwargs.empty()) fail("positional argument follows keyword argument");
      call.kids.push_back(parse_expression());
    }
  }
  expect_op(")");
}

}  // namespace kvscope::jinja
