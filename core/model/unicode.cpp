#include "model/unicode.h"

#include <algorithm>
#include <array>

namespace kvscope::unicode {
namespace {

// Unicode White_Space (PropList.txt); str.isspace() and the C locale differ, so it is spelled out.
constexpr uint32_t kWhiteSpace[] = {0x0009, 0x000A, 0x000B, 0x000C, 0x000D, 0x0020, 0x0085, 0x00A0, 0x1680,
                                    0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
                                    0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};

uint16_t lookup_ranges(uint32_t cpt) {
  const FlagRange* end = kFlagRanges + kFlagRangeCount;
  const FlagRange* it =
      std::upper_bound(kFlagRanges, end, cpt, [](uint32_t c, const FlagRange& r) { return c < r.start; });
  uint16_t f = (it == kFlagRanges) ? uint16_t(kUndefined) : (it - 1)->flags;
  for (uint32_t ws : kWhiteSpace) {
    if (ws == cpt) f |= kWhitespace;
  }
  return f;
}

// The Basic Multilingual Plane is looked up directly; the rest by binary search.
const std::vector<uint16_t>& bmp_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(0x10000);
    for (uint32_t c = 0; c < 0x10000; ++c) t[c] = lookup_ranges(c);
    return t;
  }();
  return table;
}

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<uint32_t, 256> cpt_of;
  std::array<int16_t, 256 + 68> byte_of;  // code points 0 .. 323 back to bytes, -1 for none
};

const ByteMap& byte_map() {
  static const ByteMap map = [] {
    ByteMap m;
    std::array<bool, 256> direct{};
    for (int b = 0x21; b <= 0x7E; ++b) direct[b] = true;  // '!' .. '~'
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;  // '¡' .. '¬'
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;  // '®' .. 'ÿ'
    m.byte_of.fill(-1);
    uint32_t next = 256;  // the 68 bytes without a printable image get U+0100 .. U+0143, in byte order
    for (int b = 0; b < 256; ++b) {
      m.cpt_of[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
      m.byte_of[m.cpt_of[b]] = static_cast<int16_t>(b);
      append_utf8(m.to_unicode[b], m.cpt_of[b]);
    }
    return m;
  }();
  return map;
}

}  // namespace

uint16_t flags(uint32_t cpt) {
  if (cpt < 0x10000) return bmp_table()[cpt];
  if (cpt > kMaxCodepoint) return 0;
  return lookup_ranges(cpt);
}

size_t utf8_len(char first) {
  static constexpr size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[static_cast<uint8_t>(first) >> 4];
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const size_t n = s.size();
  auto cont = [&](size_t i) { return i < n && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < n) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && cont(i + 1)) {
      out.push_back(((b & 0x1Fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3Fu));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && cont(i + 1) && cont(i + 2)) {
      out.push_back(((b & 0x0Fu) << 12) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 6) |
                    (static_cast<uint8_t>(s[i + 2]) & 0x3Fu));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
      const uint32_t c = ((b & 0x07u) << 18) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 12) |
                         ((static_cast<uint8_t>(s[i + 2]) & 0x3Fu) << 6) | (static_cast<uint8_t>(s[i + 3]) & 0x3Fu);
      if (c > kMaxCodepoint) {
        out.push_back(kReplacement);
        i += 1;
      } else {
        out.push_back(c);
        i += 4;
      }
    } else {
      out.push_back(kReplacement);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c > kMaxCodepoint) c = kReplacement;
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(const std::vector<uint32_t>& cpts) {
  std::string out;
  out.reserve(cpts.size());
  for (uint32_t c : cpts) append_utf8(out, c);
  return out;
}

const std::string& byte_to_unicode(uint8_t byte) { return byte_map().to_unicode[byte]; }

int unicode_to_byte(uint32_t cpt) {
  const ByteMap& m = byte_map();
  return cpt < m.byte_of.size() ? m.byte_of[cpt] : -1;
}

}  // namespace kvscope::unicode
