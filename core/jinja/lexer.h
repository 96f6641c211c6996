#pragma once
// Template source to tokens, with jinja2's whitespace control as transformers configures it:
// trim_blocks (the newline after a block or comment tag goes), lstrip_blocks (spaces and tabs
// before a block or comment tag on its own line go), `-` strips all whitespace on its side,
// `+` keeps it; line endings become \n and one trailing newline of the source goes.
#include <string>
#include <vector>

namespace kvscope::jinja {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // the text, name, unescaped string, number or operator
  int line = 1;
};

std::vector<Token> lex(const std::string& source);

}  // namespace kvscope::jinja
