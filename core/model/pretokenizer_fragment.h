#pragma once
// The pre-tokenizers' shared pieces (model/pretokenizer.cpp and the scanners beside it): a
// fragment of code points being split, and the emitter of consecutive piece lengths.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/unicode.h"

namespace kvscope::pretok {

// A fragment is cpts[begin, end); positions at or past `end` read as "no code point" (flags 0).
struct Fragment {
  const std::vector<uint32_t>& cpts;
  size_t begin, end;
  static constexpr uint32_t kNone = 0xFFFFFFFF;
  uint32_t cpt(size_t pos) const { return pos >= begin && pos < end ? cpts[pos] : kNone; }
  uint16_t fl(size_t pos) const { return pos >= begin && pos < end ? unicode::flags(cpts[pos]) : 0; }
};

// Emits the lengths of consecutive pieces of one fragment.
class Emitter {
 public:
  Emitter(std::vector<size_t>& out, size_t begin) : out_(out), prev_(begin) {}
  size_t to(size_t end) {
    const size_t len = end - prev_;
    if (len > 0) out_.push_back(len);
    prev_ = end;
    return len;
  }

 private:
  std::vector<size_t>& out_;
  size_t prev_;
};

// 's|'t|'re|'ve|'m|'ll|'d at pos (case-insensitive when `fold`): its length, 0 when none.
size_t contraction(const Fragment& f, size_t pos, bool fold);

// The whole-text regexes with Unicode letter case (tiktoken / Hugging Face semantics: the first
// alternative that matches at a position wins, with backtracking inside it):
//   tekken (Mistral):  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
//                      |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
//                      |\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   gpt-4o (o200k):    the same letter alternatives each followed by (?i:'s|'t|'re|'ve|'m|'ll|'d)?,
//                      and \p{N}{1,3} for \p{N}
void scan_cased(const Fragment& f, bool gpt4o, std::vector<size_t>& out);

// DeepSeek-V3's third split (after \p{N}{1,3} and the CJK/kana runs): the length of its match at
// pos, 0 when no alternative matches there:
//   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//   | ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_deepseek3_words(const Fragment& f, size_t pos);

// The white-space alternatives every one of these regexes ends with, at pos (0: not white space):
// \s*[\r\n]+ | \s+(?!\S) | \s+
size_t match_trailing_whitespace(const Fragment& f, size_t pos);

}  // namespace kvscope::pretok
