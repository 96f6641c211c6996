#pragma once
// Unicode helpers for the tokenizers: lenient UTF-8 decoding (as llama.cpp does it), code point
// category flags (generated ranges in unicode_tables.cpp) and GPT-2's byte <-> unicode mapping.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::unicode {

// Category flags of one code point; the low byte holds exactly one category.
enum Flag : uint16_t {
  kUndefined = 0x0001,    // unassigned (Cn)
  kNumber = 0x0002,       // \p{N}
  kLetter = 0x0004,       // \p{L}
  kSeparator = 0x0008,    // \p{Z}
  kAccentMark = 0x0010,   // \p{M}
  kPunctuation = 0x0020,  // \p{P}
  kSymbol = 0x0040,       // \p{S}
  kControl = 0x0080,      // \p{C} except Cn
  kCategoryMask = 0x00FF,
  kWhitespace = 0x0100,  // Unicode White_Space property (\s)
  kUpperCase = 0x0200,   // Lu and Lt (tekken's and gpt-4o's case split)
  kLowerCase = 0x0400,   // Ll
};

struct FlagRange {
  uint32_t start;
  uint16_t flags;
};
extern const FlagRange kFlagRanges[];  // sorted by start, first start is 0
extern const size_t kFlagRangeCount;

constexpr uint32_t kReplacement = 0xFFFD;
constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Category flags plus kWhitespace; 0 for values above U+10FFFF.
uint16_t flags(uint32_t cpt);
inline bool is_letter(uint32_t c) { return flags(c) & kLetter; }
inline bool is_number(uint32_t c) { return flags(c) & kNumber; }
inline bool is_punctuation(uint32_t c) { return flags(c) & kPunctuation; }
inline bool is_whitespace(uint32_t c) { return flags(c) & kWhitespace; }

// Length of the UTF-8 sequence that starts with `first` judged by its high bits alone (1 for
// continuation and invalid bytes), like llama.cpp's unicode_len_utf8.
size_t utf8_len(char first);

// Decodes like llama.cpp: each byte that does not start a well-formed sequence becomes U+FFFD and
// consumes one byte. (Overlong forms are accepted, as there.)
std::vector<uint32_t> decode_utf8(std::string_view text);
void append_utf8(std::string& out, uint32_t cpt);  // values above U+10FFFF are written as U+FFFD
std::string encode_utf8(const std::vector<uint32_t>& cpts);

// GPT-2 byte-level mapping: every byte to a printable code point, as UTF-8 ("Ġ" for ' ').
const std::string& byte_to_unicode(uint8_t byte);
int unicode_to_byte(uint32_t cpt);  // inverse; -1 when `cpt` is not an image of a byte

inline uint32_t ascii_tolower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

}  // namespace kvscope::unicode
