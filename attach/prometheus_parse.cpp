#include "attach/prometheus_parse.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace kvscope::attach {
namespace {

struct LineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool name_start(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool name_char(char c, bool colon) { return name_start(c, colon) || (c >= '0' && c <= '9'); }

class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  void skip_blanks() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  bool done() const { return i_ >= s_.size(); }
  char peek() const { return done() ? '\0' : s_[i_]; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  std::string name(bool colon) {
    if (!name_start(peek(), colon)) throw LineError("expected a name");
    const size_t from = i_;
    while (i_ < s_.size() && name_char(s_[i_], colon)) ++i_;
    return std::string(s_.substr(from, i_ - from));
  }
  std::string token() {  // up to the next blank
    const size_t from = i_;
    while (i_ < s_.size() && s_[i_] != ' ' && s_[i_] != '\t') ++i_;
    return std::string(s_.substr(from, i_ - from));
  }
  std::string quoted();
  std::string_view rest() const { return s_.substr(std::min(i_, s_.size())); }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

std::string Cursor::quoted() {
  if (!eat('"')) throw LineError("expected a quoted label value");
  std::string out;
  while (!done()) {
    const char c = s_[i_++];
    if (c == '"') return out;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (done()) break;
    const char e = s_[i_++];
    if (e == 'n')
      out += '\n';
    else if (e == '\\' || e == '"')
      out += e;
    else
      throw LineError(std::string("unknown escape \\") + e);
  }
  throw LineError("unterminated label value");
}

double parse_value(const std::string& t) {
  std::string l;
  for (char c : t) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "+inf" || l == "inf") return std::numeric_limits<double>::infinity();
  if (l == "-inf") return -std::numeric_limits<double>::infinity();
  if (l == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (t.empty() || l.find('x') != std::string::npos || l.find("inf") != std::string::npos ||
      l.find("nan") != std::string::npos)
    throw LineError("bad value '" + t + "'");
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) throw LineError("bad value '" + t + "'");
  return v;
}

void parse_labels(Cursor& c, PromSample& s) {
  while (true) {
    c.skip_blanks();
    if (c.eat('}')) return;
    std::string k = c.name(false);
    c.skip_blanks();
    if (!c.eat('=')) throw LineError("expected '=' after label " + k);
    c.skip_blanks();
    std::string v = c.quoted();
    for (const auto& [ek, ev] : s.labels)
      if (ek == k) throw LineError("duplicate label " + k);
    s.labels.emplace_back(std::move(k), std::move(v));
    c.skip_blanks();
    if (c.eat(',')) continue;
    if (!c.eat('}')) throw LineError("expected ',' or '}' in labels");
    return;
  }
}

PromSample parse_sample(std::string_view line) {
  Cursor c(line);
  PromSample s;
  s.name = c.name(true);
  c.skip_blanks();
  if (c.eat('{')) parse_labels(c, s);
  c.skip_blanks();
  s.value = parse_value(c.token());
  c.skip_blanks();
  if (!c.done()) {
    const std::string ts = c.token();
    char* end = nullptr;
    const long long v = std::strtoll(ts.c_str(), &end, 10);
    if (ts.empty() || end != ts.c_str() + ts.size()) throw LineError("bad timestamp '" + ts + "'");
    s.timestamp_ms = v;
    c.skip_blanks();
    if (!c.done()) throw LineError("trailing text after the timestamp");
  }
  return s;
}

std::string unescape_help(std::string_view t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '\\' && i + 1 < t.size() && (t[i + 1] == 'n' || t[i + 1] == '\\'))
      out += t[++i] == 'n' ? '\n' : '\\';
    else
      out += t[i];
  }
  return out;
}

void parse_comment(std::string_view line, PromText& out) {
  Cursor c(line.substr(1));
  c.skip_blanks();
  const std::string word = c.token();
  if (word != "HELP" && word != "TYPE") return;  // a plain comment
  c.skip_blanks();
  const std::string name = c.name(true);
  c.skip_blanks();
  if (word == "HELP") {
    out.helps[name] = unescape_help(c.rest());
    return;
  }
  const std::string type = c.token();
  if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped")
    throw LineError("unknown metric type '" + type + "'");
  out.types[name] = type;
}

}  // namespace

PromText parse_prometheus_text(std::string_view text) {
  PromText out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++out.lines;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos) continue;
    line.remove_prefix(first);
    try {
      if (line[0] == '#')
        parse_comment(line, out);
      else
        out.samples.push_back(parse_sample(line));
    } catch (const LineError& e) {
      if (out.errors++ == 0) out.first_error = "line " + std::to_string(out.lines) + ": " + e.what();
    }
  }
  return out;
}

}  // namespace kvscope::attach
