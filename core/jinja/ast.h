#pragma once
// The parsed template: one node type for statements and expressions, told apart by kind.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kvscope::jinja {

struct Node;
using NodePtr = std::shared_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeKind {
  // statements
  Text,
  Output,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  CallBlock,
  FilterBlock,
  Break,
  Continue,
  Scope,
  // expressions
  Const,
  Name,
  Attr,
  Item,
  Slice,
  Call,
  Filter,
  Test,
  Not,
  Neg,
  Pos,
  Binary,
  And,
  Or,
  Compare,
  Concat,
  CondExpr,
  ListLit,
  TupleLit,
  DictLit,
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string name;                                     // identifier, attribute, filter/test/macro name, operator
  Value value;                                          // Const
  std::vector<NodePtr> kids;                            // operands, call arguments, dict keys and values alternately
  std::vector<std::pair<std::string, NodePtr>> kwargs;  // keyword arguments, macro defaults
  std::vector<std::string> names;                       // for/set targets, macro parameters, compare operators
  bool negated = false;                                 // `is not`
  Body body, else_body;
};

}  // namespace kvscope::jinja
