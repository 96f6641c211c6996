#include "model/spm_tokenizer.h"

#include <cstdio>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "gguf/gguf_file.h"
#include "model/unicode.h"

namespace kvscope {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

struct Symbol {
  int prev, next;
  const char* text;
  size_t n;
};

struct Bigram {
  int left, right;
  float score;
  size_t size;
};

// Highest score first; on equal scores the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

void SpmTokenizer::configure(const GgufFile& file) {
  // llama.cpp's defaults for SPM vocabularies; GGUF keys override them in load_special().
  bos_ = 1;
  eos_ = 2;
  unk_ = 0;
  add_bos_ = true;
  add_eos_ = false;
  add_space_prefix_ = gguf_bool(file, "tokenizer.ggml.add_space_prefix").value_or(true);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    TokenId id = find_token(hex);
    if (id < 0) id = find_token(std::string(1, static_cast<char>(b)));
    byte_tokens_[b] = id;
  }
}

TokenId SpmTokenizer::byte_token(uint8_t byte) const {
  if (byte_tokens_[byte] >= 0) return byte_tokens_[byte];
  if (unk_ >= 0) return unk_;
  char hex[8];
  std::snprintf(hex, sizeof hex, "%02X", byte);
  throw std::runtime_error(std::string("tokenizer: cannot encode byte 0x") + hex + ": the vocabulary has no <0x" + hex +
                           "> token and no unknown token");
}

std::vector<TokenId> SpmTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<TokenId> out;
  const std::vector<Fragment> frags = partition(text, parse_special);
  // tokenizer.encode('', add_special_tokens=True) gives [BOS], as in SentencePiece.
  if (add_special && add_bos_) out.push_back(bos_);
  bool prev_special = true;  // the first fragment gets a space prefix, and so does text after a special token
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string escaped;
    escaped.reserve(f.length + f.length / 2 + 3);
    if (add_space_prefix_ && prev_special) escaped += kSpace;
    for (char c : text.substr(f.offset, f.length)) {
      if (c == ' ')
        escaped += kSpace;
      else
        escaped += c;
    }
    encode_escaped(escaped, out);
    prev_special = false;
  }
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

void SpmTokenizer::encode_escaped(const std::string& text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    const size_t n = std::min(unicode::utf8_len(text[offs]), text.size() - offs);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offs + n == text.size() ? -1 : index + 1, text.data() + offs, n});
    offs += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  std::unordered_map<std::string_view, std::pair<int, int>> rev_merge;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view piece(symbols[left].text, symbols[left].n + symbols[right].n);
    const TokenId id = find_token(piece);
    if (id < 0) return;
    queue.push({left, right, scores_[static_cast<size_t>(id)], piece.size()});
    rev_merge[piece] = {left, right};
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // one side was merged already
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  // A symbol that is no token is split back along the merges that built it, down to bytes.
  auto resegment = [&](auto&& self, const Symbol& s) -> void {
    const std::string_view piece(s.text, s.n);
    if (TokenId id = find_token(piece); id >= 0) {
      out.push_back(id);
      return;
    }
    auto it = rev_merge.find(piece);
    if (it == rev_merge.end()) {
      for (char c : piece) out.push_back(byte_token(static_cast<uint8_t>(c)));
      return;
    }
    self(self, symbols[it->second.first]);
    self(self, symbols[it->second.second]);
  };
  for (int i = 0; i != -1; i = symbols[i].next) resegment(resegment, symbols[i]);
}

std::string SpmTokenizer::token_to_piece(TokenId id, bool special) const {
  const std::string& text = token_text(id);
  const uint32_t a = attr(id);
  if (a & (kAttrControl | kAttrUnknown)) return special ? text : std::string();
  if (a & kAttrUserDefined) return text;
  if (a & kAttrNormal) {
    std::string piece;
    piece.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, kSpace.size(), kSpace) == 0) {
        piece += ' ';
        i += kSpace.size();
      } else {
        piece += text[i++];
      }
    }
    return piece;
  }
  if (a & kAttrByte) {
    if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
      const int hi = hex_digit(text[3]), lo = hex_digit(text[4]);
      if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
    }
    return text;  // a byte token not spelled <0xXX>
  }
  return std::string();  // undefined / unused tokens, as llama.cpp
}

}  // namespace kvscope
