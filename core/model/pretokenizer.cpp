#include "model/pretokenizer.h"

#include <stdexcept>
#include <utility>

#include "model/pretokenizer_fragment.h"
#include "model/unicode.h"

namespace kvscope {
namespace {

using pretok::contraction;
using pretok::Emitter;
using pretok::Fragment;
using unicode::flags;

constexpr uint16_t kWLN = unicode::kWhitespace | unicode::kLetter | unicode::kNumber;

struct PreType {
  const char* name;
  std::vector<PreTokenizer::Step> steps;
  bool ignore_merges;
  bool add_bos;
};

using S = PreTokenizer::Step;

const std::vector<PreType>& pre_types() {
  static const std::vector<PreType> types = {
      // llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT (also used when tokenizer.ggml.pre is absent)
      {"default", {S::PunctRun, S::Gpt2, S::NumberRun, S::AsciiDigits3}, false, false},
      {"gpt-2", {S::Gpt2}, false, false},
      {"phi-2", {S::Gpt2}, false, false},
      {"mpt", {S::Gpt2}, false, false},
      {"olmo", {S::Gpt2}, false, false},
      {"jais", {S::Gpt2}, false, false},
      {"exaone4", {S::Gpt2}, false, false},
      {"llama3", {S::Llama3}, true, true},
      {"llama-v3", {S::Llama3}, true, true},
      {"llama-bpe", {S::Llama3}, true, true},
      {"falcon3", {S::Llama3}, true, true},
      {"pixtral", {S::Llama3}, true, true},
      {"dbrx", {S::Llama3}, false, false},
      {"smaug-bpe", {S::Llama3}, false, false},
      {"qwen2", {S::Qwen2}, false, false},
      {"qwen35", {S::Qwen35}, false, false},
      {"gemma4", {S::NewlineRuns}, false, true},
      {"falcon", {S::PunctRunTick, S::Gpt2, S::AsciiDigits3}, false, false},
      {"deepseek-r1-qwen", {S::Qwen2}, false, false},
      {"stablelm2", {S::Qwen2}, false, false},
      {"megrez", {S::Qwen2}, false, false},
      {"deepseek-coder", {S::Newline, S::SpaceLetters, S::SpacePunct, S::CjkRun, S::Number}, false, false},
      {"deepseek-llm",
       {S::Newline, S::SpaceCasedLetters, S::SpaceAsciiPunct, S::TrailingSpace, S::CjkRun, S::NumberRun},
       false,
       false},
      {"starcoder", {S::Number, S::Gpt2}, false, false},
      {"refact", {S::Number, S::Gpt2}, false, false},
      {"command-r", {S::Number, S::Gpt2}, false, false},
      {"smollm", {S::Number, S::Gpt2}, false, false},
      {"codeshell", {S::Number, S::Gpt2}, false, false},
      {"granite-docling", {S::Gpt2}, false, false},
      {"lfm2", {S::Llama3}, true, true},
      {"falcon-h1", {S::Llama3}, true, true},
      {"midm-2.0", {S::Llama3}, true, true},
      // GLM-4's regex is Llama 3's; its vocabularies have no BOS.
      {"glm4", {S::Llama3}, true, false},
      {"glm5", {S::Llama3}, true, false},
      {"chatglm-bpe", {S::Llama3}, false, false},
      // Unicode letter case, as the shipped tokenizers (tiktoken, Hugging Face) apply it; llama.cpp
      // approximates it (ASCII case only) and can split differently between cased scripts.
      {"tekken", {S::Tekken}, true, true},
      {"gpt-4o", {S::Gpt4o}, false, false},
      {"llama4", {S::Gpt4o}, false, false},
      {"minimax-m2", {S::Gpt4o}, false, false},
      {"deepseek-v3", {S::Number3, S::CjkKanaRun, S::Deepseek3Words}, false, false},
  };
  return types;
}

void scan_gpt2(const Fragment& f, std::vector<size_t>& out) {
  Emitter emit(out, f.begin);
  for (size_t pos = f.begin; pos < f.end;) {
    const uint32_t c = f.cpt(pos);
    if (size_t n = contraction(f, pos, false)) {
      pos += emit.to(pos + n);
      continue;
    }
    const uint16_t fl2 = c == ' ' ? f.fl(pos + 1) : f.fl(pos);
    const uint16_t cls = fl2 & (unicode::kLetter | unicode::kNumber);
    if (cls) {  // ' ?\p{L}+' or ' ?\p{N}+'
      pos += (c == ' ');
      while (f.fl(pos) & cls) ++pos;
      emit.to(pos);
      continue;
    }
    if (!(fl2 & kWLN) && fl2) {  // ' ?[^\s\p{L}\p{N}]+'
      pos += (c == ' ');
      while (!(f.fl(pos) & kWLN) && f.fl(pos)) ++pos;
      emit.to(pos);
      continue;
    }
    size_t nws = 0;
    while (f.fl(pos + nws) & unicode::kWhitespace) ++nws;
    if (nws > 1 && f.cpt(pos + nws) != Fragment::kNone) {  // '\s+(?!\S)': leave one for the next word
      pos += nws - 1;
      emit.to(pos);
    } else if (nws > 0) {  // '\s+'
      pos += nws;
      emit.to(pos);
    } else {
      emit.to(++pos);
    }
  }
}

// marks (Qwen3.5): combining marks (\p{M}) count as letters in letter runs and are not punctuation.
void scan_llama3(const Fragment& f, size_t max_digits, bool marks, std::vector<size_t>& out) {
  const uint16_t letter = unicode::kLetter | (marks ? unicode::kAccentMark : 0);
  const uint16_t wln = kWLN | (marks ? unicode::kAccentMark : 0);
  Emitter emit(out, f.begin);
  for (size_t pos = f.begin; pos < f.end;) {
    const uint32_t c = f.cpt(pos);
    const uint16_t fl = f.fl(pos);
    if (size_t n = contraction(f, pos, true)) {
      pos += emit.to(pos + n);
      continue;
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(c == '\r' || c == '\n' || (fl & unicode::kNumber))) {
      if ((fl & letter) || (f.fl(pos + 1) & letter)) {
        ++pos;
        while (f.fl(pos) & letter) ++pos;
        emit.to(pos);
        continue;
      }
    }
    // \p{N}{1,max_digits}
    if (fl & unicode::kNumber) {
      size_t ini = pos;
      while (f.fl(pos) & unicode::kNumber) {
        if (++pos - ini >= max_digits) {
          emit.to(pos);
          ini = pos;
        }
      }
      emit.to(pos);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    const uint16_t fl2 = c == ' ' ? f.fl(pos + 1) : fl;
    if (!(fl2 & wln) && fl) {
      pos += (c == ' ');
      while (!(f.fl(pos) & wln) && f.fl(pos)) ++pos;
      while (f.cpt(pos) == '\r' || f.cpt(pos) == '\n') ++pos;
      emit.to(pos);
      continue;
    }
    size_t nws = 0, last_newline_end = 0;
    while (f.fl(pos + nws) & unicode::kWhitespace) {
      const uint32_t w = f.cpt(pos + nws);
      if (w == '\r' || w == '\n') last_newline_end = pos + nws + 1;
      ++nws;
    }
    if (last_newline_end > 0) {  // \s*[\r\n]+
      pos = last_newline_end;
      emit.to(pos);
    } else if (nws > 1 && f.cpt(pos + nws) != Fragment::kNone) {  // \s+(?!\S)
      pos += nws - 1;
      emit.to(pos);
    } else if (nws > 0) {  // \s+
      pos += nws;
      emit.to(pos);
    } else {
      emit.to(++pos);
    }
  }
}

bool is_ws(uint32_t c) { return flags(c) & unicode::kWhitespace; }

// deepseek-llm's letter class, the ranges of its regex as llama.cpp spells them.
bool is_cased_letter(uint32_t c) {
  static constexpr std::pair<uint32_t, uint32_t> kRanges[] = {
      {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},       {0xD8, 0xF6},
      {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2AF},     {0x370, 0x373},
      {0x376, 0x376},     {0x377, 0x377},     {0x37B, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},
      {0x388, 0x38A},     {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},
      {0x48A, 0x52F},     {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
      {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},
      {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},
      {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},
      {0x1FB6, 0x1FBC},   {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
      {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},
      {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},
      {0x2126, 0x2126},   {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},
      {0x213C, 0x213F},   {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2183},   {0x2184, 0x2184},
      {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF2},   {0x2CF3, 0x2CF3},
      {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
      {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},
      {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2},
      {0x118A0, 0x118DF}, {0x1E900, 0x1E943}};
  for (const auto& [lo, hi] : kRanges)
    if (c >= lo && c <= hi) return true;
  return false;
}

// [!-/:-~！-／：-～‘-‟　-。], less white space (U+3000 is '\v' by the time the regex sees it).
bool is_ascii_like_punct(uint32_t c) {
  if (is_ws(c)) return false;
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}

// Length of the match of a simple pattern at `pos` (0: none). These patterns run through std::regex
// in llama.cpp, which searches for the leftmost match and keeps the text between matches as pieces.
size_t match_simple(S step, const Fragment& f, size_t pos) {
  auto run = [&](size_t p, auto pred) {
    while (p < f.end && pred(f.cpts[p])) ++p;
    return p;
  };
  const uint32_t c = f.cpts[pos];
  switch (step) {
    case S::PunctRun:
    case S::PunctRunTick: {
      const bool tick = step == S::PunctRunTick;
      auto pred = [tick](uint32_t x) {
        if (x < 0x80 && (x == '$' || x == '+' || x == '<' || x == '=' || x == '>' || x == '^' || x == '~' || x == '|' ||
                         (tick && x == '`')))
          return true;
        return (flags(x) & unicode::kPunctuation) && !(x >= 0x80 && is_ws(x));
      };
      return run(pos, pred) - pos;
    }
    case S::NumberRun:
      return run(pos, [](uint32_t x) { return unicode::is_number(x); }) - pos;
    case S::Number3: {
      size_t p = pos;
      while (p < f.end && p < pos + 3 && unicode::is_number(f.cpts[p])) ++p;
      return p - pos;
    }
    case S::CjkKanaRun:  // [一-龥぀-ゟ゠-ヿ]+
      return run(pos, [](uint32_t x) { return (x >= 0x4E00 && x <= 0x9FA5) || (x >= 0x3040 && x <= 0x30FF); }) - pos;
    case S::Deepseek3Words:
      return pretok::match_deepseek3_words(f, pos);
    case S::Number:
      return unicode::is_number(c) ? 1 : 0;
    case S::AsciiDigits3: {
      auto d = [&](size_t p) { return p < f.end && f.cpts[p] >= '0' && f.cpts[p] <= '9'; };
      return d(pos) && d(pos + 1) && d(pos + 2) ? 3 : 0;
    }
    case S::Newline:
      return c == '\r' || c == '\n' ? 1 : 0;
    case S::SpaceCasedLetters:
    case S::SpaceAsciiPunct:
    case S::SpaceLetters:
    case S::SpacePunct: {
      const uint16_t cls = step == S::SpaceLetters ? unicode::kLetter : unicode::kPunctuation;
      auto pred = [cls, step](uint32_t x) {
        if (step == S::SpaceCasedLetters) return is_cased_letter(x);
        if (step == S::SpaceAsciiPunct) return is_ascii_like_punct(x);
        return (flags(x) & cls) != 0;
      };
      size_t p = pos;
      if (is_ws(c) && p + 1 < f.end && pred(f.cpts[p + 1])) ++p;  // \s?
      const size_t e = run(p, pred);
      return e > p ? e - pos : 0;
    }
    case S::NewlineRuns: {  // every position starts a match: a run of newlines or of anything else
      const bool nl = c == '\n';
      return run(pos, [nl](uint32_t x) { return (x == '\n') == nl; }) - pos;
    }
    case S::TrailingSpace: {  // the leftmost start of a white-space run that reaches the end
      const size_t e = run(pos, [](uint32_t x) { return is_ws(x); });
      return e == f.end ? e - pos : 0;
    }
    case S::CjkRun: {
      // the regex runs on code points where non-ASCII white space has been replaced by '\v'
      auto pred = [](uint32_t x) {
        if (is_ws(x)) return false;
        return (x >= 0x4E00 && x <= 0x9FA5) || (x >= 0x0800 && x <= 0x4E00) || (x >= 0xAC00 && x <= 0xD7FF);
      };
      return run(pos, pred) - pos;
    }
    default:
      return 0;
  }
}

std::vector<size_t> apply(S step, const std::vector<uint32_t>& cpts, const std::vector<size_t>& pieces) {
  std::vector<size_t> out;
  out.reserve(pieces.size() * 2);
  size_t start = 0;
  for (size_t len : pieces) {
    const Fragment f{cpts, start, start + len};
    switch (step) {
      case S::Gpt2:
        scan_gpt2(f, out);
        break;
      case S::Llama3:
        scan_llama3(f, 3, false, out);
        break;
      case S::Qwen2:
        scan_llama3(f, 1, false, out);
        break;
      case S::Qwen35:
        scan_llama3(f, 1, true, out);
        break;
      case S::Tekken:
      case S::Gpt4o:
        pretok::scan_cased(f, step == S::Gpt4o, out);
        break;
      default: {
        size_t gap = f.begin;
        for (size_t pos = f.begin; pos < f.end;) {
          const size_t n = match_simple(step, f, pos);
          if (n == 0) {
            ++pos;
            continue;
          }
          if (pos > gap) out.push_back(pos - gap);
          out.push_back(n);
          pos += n;
          gap = pos;
        }
        if (f.end > gap) out.push_back(f.end - gap);
      }
    }
    start += len;
  }
  return out;
}

}  // namespace

PreTokenizer::PreTokenizer(const std::string& pre) {
  for (const PreType& t : pre_types()) {
    if (pre == t.name) {
      steps_ = t.steps;
      ignore_merges_ = t.ignore_merges;
      default_add_bos_ = t.add_bos;
      return;
    }
  }
  std::string names;
  for (const std::string& n : supported_names()) {
    if (!names.empty()) names += ", ";
    names += n;
  }
  throw std::runtime_error("unsupported BPE pre-tokenizer '" + pre + "' (tokenizer.ggml.pre); supported: " + names);
}

std::vector<std::string> PreTokenizer::supported_names() {
  std::vector<std::string> names;
  for (const PreType& t : pre_types()) names.emplace_back(t.name);
  return names;
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  const std::vector<uint32_t> cpts = unicode::decode_utf8(text);
  std::vector<size_t> pieces;
  if (!cpts.empty()) pieces.push_back(cpts.size());
  for (Step step : steps_) pieces = apply(step, cpts, pieces);

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t start = 0;
  for (size_t len : pieces) {
    std::string w;
    for (size_t i = start; i < start + len; ++i) unicode::append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
    start += len;
  }
  return words;
}

}  // namespace kvscope
