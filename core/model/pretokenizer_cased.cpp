#include "model/pretokenizer_fragment.h"

namespace kvscope::pretok {

namespace {

constexpr uint16_t kCase = unicode::kUpperCase | unicode::kLowerCase;

// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]: a letter that is not lower case, or a mark.
bool upperish(uint16_t fl) {
  return ((fl & unicode::kLetter) && !(fl & unicode::kLowerCase)) || (fl & unicode::kAccentMark);
}
// [\p{Ll}\p{Lm}\p{Lo}\p{M}]: a letter that is not upper or title case, or a mark.
bool lowerish(uint16_t fl) {
  return ((fl & unicode::kLetter) && !(fl & unicode::kUpperCase)) || (fl & unicode::kAccentMark);
}
static_assert(kCase == 0x600);

// [^\r\n\p{L}\p{N}]
bool prefix_char(const Fragment& f, size_t pos) {
  const uint32_t c = f.cpt(pos);
  return c != Fragment::kNone && c != '\r' && c != '\n' && !(f.fl(pos) & (unicode::kLetter | unicode::kNumber));
}

// U*L+ from s (backtracking as a regex does): its end, 0 when it cannot match.
size_t upper_star_lower_plus(const Fragment& f, size_t s) {
  size_t j = s;
  while (upperish(f.fl(j))) ++j;
  if (lowerish(f.fl(j))) {
    size_t k = j;
    while (lowerish(f.fl(k))) ++k;
    return k;
  }
  // U* gives back characters until one of them can start L+; L+ then ends where U* stopped.
  for (size_t m = j; m > s; --m)
    if (lowerish(f.fl(m - 1))) return m;
  return 0;
}

// U+L* from s: its end, 0 when it cannot match.
size_t upper_plus_lower_star(const Fragment& f, size_t s) {
  size_t j = s;
  while (upperish(f.fl(j))) ++j;
  if (j == s) return 0;
  while (lowerish(f.fl(j))) ++j;
  return j;
}

// One letter alternative with its optional prefix (taken first, as the regex tries it).
size_t letters(const Fragment& f, size_t pos, bool first_alternative) {
  for (int take = 1; take >= 0; --take) {
    if (take && !prefix_char(f, pos)) continue;
    const size_t s = pos + static_cast<size_t>(take);
    const size_t e = first_alternative ? upper_star_lower_plus(f, s) : upper_plus_lower_star(f, s);
    if (e > 0) return e;
  }
  return 0;
}

// ' ?[^\s\p{L}\p{N}]+[\r\n/]*' at pos: its end, 0 when none.
size_t other_run(const Fragment& f, size_t pos) {
  constexpr uint16_t kWLN = unicode::kWhitespace | unicode::kLetter | unicode::kNumber;
  auto other = [&](size_t p) { return f.fl(p) && !(f.fl(p) & kWLN); };
  size_t p = pos + (f.cpt(pos) == ' ' && other(pos + 1) ? 1 : 0);
  if (!other(p)) return 0;
  while (other(p)) ++p;
  while (f.cpt(p) == '\r' || f.cpt(p) == '\n' || f.cpt(p) == '/') ++p;
  return p;
}

}  // namespace

size_t contraction(const Fragment& f, size_t pos, bool fold) {
  if (f.cpt(pos) != '\'' || pos + 1 >= f.end) return 0;
  auto low = [&](uint32_t c) { return fold ? unicode::ascii_tolower(c) : c; };
  const uint32_t n1 = low(f.cpt(pos + 1));
  if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
  if (pos + 2 >= f.end) return 0;
  const uint32_t n2 = low(f.cpt(pos + 2));
  if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
  return 0;
}

size_t match_trailing_whitespace(const Fragment& f, size_t pos) {
  size_t n = 0, newline_end = 0;
  while (f.fl(pos + n) & unicode::kWhitespace) {
    const uint32_t w = f.cpt(pos + n);
    ++n;
    if (w == '\r' || w == '\n') newline_end = n;
  }
  if (newline_end > 0) return newline_end;                       // \s*[\r\n]+
  if (n > 1 && f.cpt(pos + n) != Fragment::kNone) return n - 1;  // \s+(?!\S)
  return n;                                                      // \s+
}

void scan_cased(const Fragment& f, bool gpt4o, std::vector<size_t>& out) {
  Emitter emit(out, f.begin);
  for (size_t pos = f.begin; pos < f.end;) {
    size_t e = letters(f, pos, true);
    if (e == 0) e = letters(f, pos, false);
    if (e > 0) {
      if (gpt4o) e += contraction(f, e, true);
    } else if (f.fl(pos) & unicode::kNumber) {
      e = pos + 1;
      if (gpt4o)
        while (e < pos + 3 && (f.fl(e) & unicode::kNumber)) ++e;
    } else if (size_t o = other_run(f, pos)) {
      e = o;
    } else if (size_t w = match_trailing_whitespace(f, pos)) {
      e = pos + w;
    } else {
      e = pos + 1;  // unreachable for these regexes: every code point matches an alternative
    }
    pos = e;
    emit.to(pos);
  }
}

size_t match_deepseek3_words(const Fragment& f, size_t pos) {
  auto ascii_letter = [&](size_t p) {
    const uint32_t c = f.cpt(p);
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
  };
  const uint32_t c = f.cpt(pos);
  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
  const bool ascii_punct =
      (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  if (ascii_punct && ascii_letter(pos + 1)) {
    size_t p = pos + 1;
    while (ascii_letter(p)) ++p;
    return p - pos;
  }
  // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
  constexpr uint16_t kLM = unicode::kLetter | unicode::kAccentMark;
  constexpr uint16_t kLPS = unicode::kLetter | unicode::kPunctuation | unicode::kSymbol;
  const bool prefix = c != Fragment::kNone && c != '\r' && c != '\n' && !(f.fl(pos) & kLPS);
  for (int take = prefix ? 1 : 0; take >= 0; --take) {
    size_t p = pos + static_cast<size_t>(take);
    const size_t s = p;
    while (f.fl(p) & kLM) ++p;
    if (p > s) return p - pos;
  }
  // ' ?[\p{P}\p{S}]+[\r\n]*'
  constexpr uint16_t kPS = unicode::kPunctuation | unicode::kSymbol;
  size_t p = pos + (c == ' ' && (f.fl(pos + 1) & kPS) ? 1 : 0);
  if (f.fl(p) & kPS) {
    while (f.fl(p) & kPS) ++p;
    while (f.cpt(p) == '\r' || f.cpt(p) == '\n') ++p;
    return p - pos;
  }
  return match_trailing_whitespace(f, pos);
}

}  // namespace kvscope::pretok
