// Utf8StreamDecoder: token pieces are arbitrary bytes (SPM byte fallback, byte-level BPE), so one
// character may arrive over several tokens. Complete characters pass through; a valid but
// unfinished sequence at the end is held back; each maximal ill-formed subpart becomes U+FFFD
// (the Unicode "substitution of maximal subparts" practice).
#include <cstdint>

#include "model/tokenizer.h"

namespace kvscope {
namespace {

constexpr const char* kReplacementUtf8 = "\xEF\xBF\xBD";

// Well-formed UTF-8 (Unicode Table 3-7): length from the lead byte and the allowed range of the
// second byte; later bytes are 80..BF. Returns 0 for bytes that cannot start a sequence.
int sequence_length(uint8_t lead, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
    return 4;
  }
  return 0;
}

// Decodes `in` into `out`. With `final` false, an unfinished sequence at the end is returned
// (to be completed by later bytes) instead of being replaced.
std::string decode(const std::string& in, std::string& out, bool final) {
  size_t i = 0;
  const size_t n = in.size();
  while (i < n) {
    const auto lead = static_cast<uint8_t>(in[i]);
    uint8_t lo, hi;
    const int len = sequence_length(lead, lo, hi);
    if (len == 0) {
      out += kReplacementUtf8;
      ++i;
      continue;
    }
    int good = 1;  // bytes of the sequence that are valid so far
    while (good < len && i + good < n) {
      const auto b = static_cast<uint8_t>(in[i + good]);
      const uint8_t min = good == 1 ? lo : 0x80, max = good == 1 ? hi : 0xBF;
      if (b < min || b > max) break;
      ++good;
    }
    if (good == len) {
      out.append(in, i, len);
      i += len;
    } else if (i + good == n && !final) {
      return in.substr(i);  // valid so far, wait for the rest
    } else {
      out += kReplacementUtf8;  // one replacement for the maximal valid prefix
      i += good;
    }
  }
  return std::string();
}

}  // namespace

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  pending_ = decode(pending_, out, false);
  return out;
}

std::string Utf8StreamDecoder::flush() {
  std::string out;
  decode(pending_, out, true);
  pending_.clear();
  return out;
}

}  // namespace kvscope
