#include "jinja/lexer.h"

#include <cctype>
#include <cstring>

#include "jinja/error.h"
#include "jinja/utf8.h"

namespace kvscope::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string normalize_newlines(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

int hex_value(const std::string& s, size_t pos, size_t count) {
  if (pos + count > s.size()) return -1;
  int v = 0;
  for (size_t i = pos; i < pos + count; ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return -1;
    v = v * 16 + (std::isdigit(static_cast<unsigned char>(s[i])) ? s[i] - '0' : (std::tolower(s[i]) - 'a' + 10));
  }
  return v;
}

// Python's unicode-escape decoding, which jinja2 applies to string literals.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    static const char* simple_in = "ntrbfva\\'\"\n";
    static const char* simple_out = "\n\t\r\b\f\v\a\\'\"";
    if (const char* p = std::strchr(simple_in, c); p && c) {
      if (c != '\n') out += simple_out[p - simple_in];
      continue;
    }
    const size_t width = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    const int cp = width ? hex_value(s, i + 1, width) : -1;
    if (cp >= 0) {
      append_utf8(out, static_cast<uint32_t>(cp));
      i += width;
    } else if (c >= '0' && c <= '7') {
      int v = c - '0';
      for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) v = v * 8 + (s[++i] - '0');
      append_utf8(out, static_cast<uint32_t>(v));
    } else if (width) {
      throw Error("invalid \\" + std::string(1, c) + " escape in a string literal");
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}
  std::vector<Token> run();

 private:
  void text_until_tag();
  void lex_tag(char kind);
  void lex_comment();
  bool lex_raw();
  void lex_expression(const char* end, Tok end_type);
  bool at_end_tag(const char* end, size_t& len, char& sign) const;
  void after_tag(char sign, bool trim_newline);
  void lex_string();
  void lex_number();
  void emit(Tok t, std::string text) { out_.push_back({t, std::move(text), line_}); }
  void advance(size_t n) {
    for (size_t k = 0; k < n && pos_ < s_.size(); ++k, ++pos_)
      if (s_[pos_] == '\n') ++line_;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

std::vector<Token> Lexer::run() {
  while (pos_ < s_.size()) text_until_tag();
  emit(Tok::Eof, "");
  return out_;
}

void Lexer::text_until_tag() {
  size_t p = pos_;
  while ((p = s_.find('{', p)) != std::string::npos) {
    if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) break;
    ++p;
  }
  if (p == std::string::npos) p = s_.size();
  std::string text = s_.substr(pos_, p - pos_);
  const char kind = p < s_.size() ? s_[p + 1] : 0;
  const char sign = p + 2 < s_.size() ? s_[p + 2] : 0;
  if (kind && sign == '-') {
    while (!text.empty() && is_space(text.back())) text.pop_back();
  } else if (kind && kind != '{' && sign != '+') {
    const size_t l = text.rfind('\n') + 1;  // npos + 1 == 0
    bool blank = l < text.size();
    for (size_t i = l; i < text.size() && blank; ++i) blank = is_space(text[i]);
    if (blank && (l > 0 || line_starting_)) text.resize(l);
  }
  if (!text.empty()) emit(Tok::Text, text);
  advance(p - pos_);
  if (kind) lex_tag(kind);
}

void Lexer::lex_tag(char kind) {
  if (kind == '#') return lex_comment();
  if (kind == '%' && lex_raw()) return;
  advance(2);
  if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) advance(1);
  if (kind == '{') {
    emit(Tok::VarBegin, "");
    lex_expression("}}", Tok::VarEnd);
  } else {
    emit(Tok::BlockBegin, "");
    lex_expression("%}", Tok::BlockEnd);
  }
}

void Lexer::after_tag(char sign, bool trim_newline) {
  if (sign == '-') {
    size_t k = 0;
    while (pos_ + k < s_.size() && is_space(s_[pos_ + k])) ++k;
    advance(k);
  } else if (sign != '+' && trim_newline && pos_ < s_.size() && s_[pos_] == '\n') {
    advance(1);
  }
  line_starting_ = pos_ > 0 && s_[pos_ - 1] == '\n';
}

void Lexer::lex_comment() {
  const int start_line = line_;
  const size_t end = s_.find("#}", pos_ + 2);
  if (end == std::string::npos) throw Error("line " + std::to_string(start_line) + ": missing end of comment tag");
  const char sign = end > pos_ + 2 && (s_[end - 1] == '-' || s_[end - 1] == '+') ? s_[end - 1] : 0;
  advance(end + 2 - pos_);
  after_tag(sign, true);
}

// {% raw %}...{% endraw %}: the text between is output as written.
bool Lexer::lex_raw() {
  size_t p = pos_ + 2;
  if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ++p;
  while (p < s_.size() && is_space(s_[p])) ++p;
  if (s_.compare(p, 3, "raw") != 0) return false;
  p += 3;
  while (p < s_.size() && is_space(s_[p])) ++p;
  char sign = 0;
  if (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) sign = s_[p++];
  if (s_.compare(p, 2, "%}") != 0) return false;
  advance(p + 2 - pos_);
  after_tag(sign, true);
  size_t q = pos_;
  while ((q = s_.find("{%", q)) != std::string::npos) {
    size_t r = q + 2;
    if (r < s_.size() && (s_[r] == '-' || s_[r] == '+')) ++r;
    while (r < s_.size() && is_space(s_[r])) ++r;
    if (s_.compare(r, 6, "endraw") == 0) break;
    q += 2;
  }
  if (q == std::string::npos) throw Error("missing endraw");
  std::string body = s_.substr(pos_, q - pos_);
  if (s_[q + 2] == '-')
    while (!body.empty() && is_space(body.back())) body.pop_back();
  if (!body.empty()) emit(Tok::Text, body);
  advance(q - pos_);
  size_t close = s_.find("%}", q);
  if (close == std::string::npos) throw Error("missing end of endraw tag");
  const char end_sign = s_[close - 1] == '-' || s_[close - 1] == '+' ? s_[close - 1] : 0;
  advance(close + 2 - pos_);
  after_tag(end_sign, true);
  return true;
}

bool Lexer::at_end_tag(const char* end, size_t& len, char& sign) const {
  sign = 0;
  if ((s_[pos_] == '-' || s_[pos_] == '+') && s_.compare(pos_ + 1, 2, end) == 0) {
    sign = s_[pos_];
    len = 3;
    return true;
  }
  len = 2;
  return s_.compare(pos_, 2, end) == 0;
}

void Lexer::lex_expression(const char* end, Tok end_type) {
  int depth = 0;
  const int start_line = line_;
  while (true) {
    while (pos_ < s_.size() && is_space(s_[pos_])) advance(1);
    if (pos_ >= s_.size())
      throw Error("line " + std::to_string(start_line) + ": unexpected end of template, expected '" + end + "'");
    size_t len;
    char sign;
    if (depth == 0 && at_end_tag(end, len, sign)) {
      advance(len);
      emit(end_type, "");
      after_tag(sign, end_type == Tok::BlockEnd);
      return;
    }
    const char c = s_[pos_];
    if (c == '\'' || c == '"') {
      lex_string();
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t k = pos_;
      while (k < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[k])) || s_[k] == '_')) ++k;
      emit(Tok::Name, s_.substr(pos_, k - pos_));
      advance(k - pos_);
    } else {
      static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* t : two)
        if (s_.compare(pos_, 2, t) == 0) op = t;
      if (op.size() == 1 && !std::strchr("+-*/%~<>=()[]{},.:|!", c))
        throw Error("line " + std::to_string(line_) + ": unexpected char '" + op + "'");
      if (op == "(" || op == "[" || op == "{") ++depth;
      if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
      emit(Tok::Op, op);
      advance(op.size());
    }
  }
}

void Lexer::lex_string() {
  const char q = s_[pos_];
  size_t k = pos_ + 1;
  while (k < s_.size() && s_[k] != q) k += s_[k] == '\\' ? 2 : 1;
  if (k >= s_.size()) throw Error("line " + std::to_string(line_) + ": unterminated string");
  emit(Tok::String, unescape(s_.substr(pos_ + 1, k - pos_ - 1)));
  advance(k + 1 - pos_);
}

void Lexer::lex_number() {
  size_t k = pos_;
  auto digits = [&] {
    while (k < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[k])) || s_[k] == '_')) ++k;
  };
  digits();
  bool is_float = false;
  if (k + 1 < s_.size() && s_[k] == '.' && std::isdigit(static_cast<unsigned char>(s_[k + 1]))) {
    is_float = true;
    ++k;
    digits();
  }
  if (k < s_.size() && (s_[k] == 'e' || s_[k] == 'E')) {
    size_t e = k + 1;
    if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
    if (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) {
      is_float = true;
      k = e;
      digits();
    }
  }
  std::string text;
  for (size_t i = pos_; i < k; ++i)
    if (s_[i] != '_') text += s_[i];
  emit(is_float ? Tok::Float : Tok::Int, text);
  advance(k - pos_);
}

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace kvscope::jinja
