#pragma once
// The recursive-descent parser shared by parser_stmt.cpp (tags) and parser_expr.cpp
// (expressions). Nesting is bounded, so a hostile template cannot overflow the stack here.
#include <initializer_list>
#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace kvscope::jinja {

inline constexpr int kMaxParseDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}
  Body parse_template();

  // statements (parser_stmt.cpp)
  Body parse_until(std::initializer_list<const char*> ends, std::string& found);
  NodePtr parse_statement();
  NodePtr parse_if();
  NodePtr parse_for();
  NodePtr parse_set();
  NodePtr parse_macro();
  NodePtr parse_filter_block();
  NodePtr parse_scope_block(const char* end);
  void end_block();

  // expressions (parser_expr.cpp)
  NodePtr parse_tuple(bool with_condexpr = true, bool explicit_parens = false);
  NodePtr parse_expression(bool with_condexpr = true);
  NodePtr parse_or();
  NodePtr parse_and();
  NodePtr parse_not();
  NodePtr parse_compare();
  NodePtr parse_math1();
  NodePtr parse_concat();
  NodePtr parse_math2();
  NodePtr parse_pow();
  NodePtr parse_unary(bool with_filter = true);
  NodePtr parse_primary();
  NodePtr parse_postfix(NodePtr node);
  NodePtr parse_filter_expr(NodePtr node);
  NodePtr parse_subscript(NodePtr node);
  NodePtr parse_filter(NodePtr node);
  NodePtr parse_test(NodePtr node);
  void parse_call_args(Node& call);
  NodePtr parse_list();
  NodePtr parse_dict();

  // token helpers
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool accept_op(const char* op);
  bool accept_name(const char* name);
  void expect_op(const char* op);
  std::string expect_name();
  [[noreturn]] void fail(const std::string& what) const;
  NodePtr make(NodeKind kind) const;

  struct DepthGuard {
    explicit DepthGuard(Parser& p);
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  friend struct DepthGuard;

 public:
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
};

}  // namespace kvscope::jinja
