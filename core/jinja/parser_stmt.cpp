#include "jinja/error.h"
#include "jinja/parser.h"
#include "jinja/parser_impl.h"

namespace kvscope::jinja {

NodePtr Parser::make(NodeKind kind) const {
  auto n = std::make_shared<Node>();
  n->kind = kind;
  n->line = cur().line;
  return n;
}

void Parser::fail(const std::string& what) const {
  throw Error("syntax error at line " + std::to_string(cur().line) + ": " + what);
}

bool Parser::accept_op(const char* op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::accept_name(const char* name) {
  if (!is_name(name)) return false;
  next();
  return true;
}

void Parser::expect_op(const char* op) {
  if (!accept_op(op)) fail(std::string("expected '") + op + "', got '" + cur().text + "'");
}

std::string Parser::expect_name() {
  if (cur().type != Tok::Name) fail("expected a name, got '" + cur().text + "'");
  std::string name = cur().text;
  next();
  return name;
}

void Parser::end_block() {
  if (cur().type != Tok::BlockEnd) fail("expected end of block, got '" + cur().text + "'");
  next();
}

Body Parser::parse_template() {
  std::string found;
  Body body = parse_until({}, found);
  if (cur().type != Tok::Eof) fail("unexpected '" + cur().text + "'");
  return body;
}

// Parses nodes until `{% <one of ends>`; leaves the end's name as the current token.
Body Parser::parse_until(std::initializer_list<const char*> ends, std::string& found) {
  DepthGuard guard(*this);
  Body body;
  while (cur().type != Tok::Eof) {
    if (cur().type == Tok::Text) {
      auto n = make(NodeKind::Text);
      n->value = Value(cur().text);
      body.push_back(n);
      next();
    } else if (cur().type == Tok::VarBegin) {
      next();
      auto n = make(NodeKind::Output);
      n->kids = {parse_tuple()};
      if (cur().type != Tok::VarEnd) fail("expected '}}', got '" + cur().text + "'");
      next();
      body.push_back(n);
    } else if (cur().type == Tok::BlockBegin) {
      next();
      for (const char* end : ends)
        if (is_name(end)) {
          found = end;
          return body;
        }
      body.push_back(parse_statement());
    } else {
      fail("unexpected '" + cur().text + "'");
    }
  }
  if (ends.size()) {
    std::string expected;
    for (const char* end : ends) expected += cat({expected.empty() ? "'" : ", '", end, "'"});
    fail("unexpected end of template, expected " + expected);
  }
  return body;
}

NodePtr Parser::parse_statement() {
  const std::string tag = cur().type == Tok::Name ? cur().text : "";
  if (tag == "if") return parse_if();
  if (tag == "for") return parse_for();
  if (tag == "set") return parse_set();
  if (tag == "macro") return parse_macro();
  if (tag == "filter") return parse_filter_block();
  if (tag == "generation") return parse_scope_block("endgeneration");
  if (tag == "break" || tag == "continue") {
    auto n = make(tag == "break" ? NodeKind::Break : NodeKind::Continue);
    next();
    end_block();
    return n;
  }
  fail("encountered unknown tag '" + cur().text + "'");
}

NodePtr Parser::parse_if() {
  auto n = make(NodeKind::If);
  next();
  n->kids = {parse_tuple(false)};
  end_block();
  std::string found;
  n->body = parse_until({"elif", "else", "endif"}, found);
  next();
  if (found == "elif") {
    --i_;  // re-read `elif` as the `if` of a nested node
    n->else_body = {parse_if()};
    return n;
  }
  if (found == "else") {
    end_block();
    n->else_body = parse_until({"endif"}, found);
    next();
  }
  end_block();
  return n;
}

NodePtr Parser::parse_for() {
  auto n = make(NodeKind::For);
  next();
  const bool parens = accept_op("(");
  do n->names.push_back(expect_name());
  while (accept_op(","));
  if (parens) expect_op(")");
  if (!accept_name("in")) fail("expected 'in' in for loop");
  n->kids = {parse_tuple(false), nullptr};
  if (accept_name("if")) n->kids[1] = parse_expression();
  if (accept_name("recursive")) fail("recursive for loops are not supported");
  end_block();
  std::string found;
  n->body = parse_until({"endfor", "else"}, found);
  next();
  if (found == "else") {
    end_block();
    n->else_body = parse_until({"endfor"}, found);
    next();
  }
  end_block();
  return n;
}

NodePtr Parser::parse_set() {
  auto n = make(NodeKind::Set);
  next();
  do n->names.push_back(expect_name());
  while (accept_op(","));
  if (n->names.size() == 1 && accept_op(".")) n->name = expect_name();  // set ns.attr = ...
  if (n->names.size() == 1 && n->name.empty() && cur().type == Tok::BlockEnd) {
    n->kind = NodeKind::SetBlock;
    end_block();
    std::string found;
    n->body = parse_until({"endset"}, found);
    next();
    end_block();
    return n;
  }
  expect_op("=");
  n->kids = {parse_tuple()};
  end_block();
  return n;
}

NodePtr Parser::parse_macro() {
  auto n = make(NodeKind::Macro);
  next();
  n->name = expect_name();
  expect_op("(");
  while (!is_op(")")) {
    if (!n->names.empty()) expect_op(",");
    if (is_op(")")) break;
    n->names.push_back(expect_name());
    if (accept_op("="))
      n->kwargs.emplace_back(n->names.back(), parse_expression());
    else if (!n->kwargs.empty())
      fail("non-default argument follows default argument");
  }
  expect_op(")");
  end_block();
  std::string found;
  n->body = parse_until({"endmacro"}, found);
  next();
  end_block();
  return n;
}

NodePtr Parser::parse_filter_block() {
  auto n = make(NodeKind::FilterBlock);
  next();
  auto placeholder = make(NodeKind::Const);
  NodePtr filter = placeholder;
  do {
    auto f = make(NodeKind::Filter);
    f->name = expect_name();
    f->kids = {filter};
    if (is_op("(")) parse_call_args(*f);
    filter = f;
  } while (accept_op("|"));
  n->kids = {filter, placeholder};
  end_block();
  std::string found;
  n->body = parse_until({"endfilter"}, found);
  next();
  end_block();
  return n;
}

NodePtr Parser::parse_scope_block(const char* end) {
  auto n = make(NodeKind::Scope);
  next();
  end_block();
  std::string found;
  n->body = parse_until({end}, found);
  next();
  end_block();
  return n;
}

Body parse(const std::string& source) { return Parser(lex(source)).parse_template(); }

}  // namespace kvscope::jinja
