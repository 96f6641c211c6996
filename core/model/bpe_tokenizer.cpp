#include "model/bpe_tokenizer.h"

#include <cstdio>
#include <queue>
#include <stdexcept>

#include "gguf/gguf_file.h"
#include "model/unicode.h"

namespace kvscope {
namespace {

// Unambiguous key for a merge pair: the left part's length, then both parts.
void merge_key(std::string& key, std::string_view left, std::string_view right) {
  key.clear();
  const auto n = static_cast<uint32_t>(left.size());
  key.append(reinterpret_cast<const char*>(&n), sizeof n);
  key.append(left);
  key.append(right);
}

struct Symbol {
  int prev, next;
  const char* text;
  size_t n;
};

struct Bigram {
  int left, right;
  int rank;
  std::string text;
};

// Lowest rank first; on equal ranks the leftmost pair.
struct BigramGreater {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

}  // namespace

void BpeTokenizer::configure(const GgufFile& file) {
  pre_tokenizer_ = std::make_unique<PreTokenizer>(pre_);
  raw_utf8_ = model_name() == "gemma4";
  add_bos_ = pre_tokenizer_->default_add_bos();
  add_eos_ = false;
  add_space_prefix_ = false;

  auto merges = gguf_strings(file, "tokenizer.ggml.merges");
  if (!merges) throw std::runtime_error("tokenizer: gpt2 vocabulary without tokenizer.ggml.merges");
  ranks_.clear();
  ranks_.reserve(merges->size());
  std::string key;
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string& m = (*merges)[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos || sp + 1 >= m.size())
      throw std::runtime_error("tokenizer: tokenizer.ggml.merges entry " + std::to_string(i) + " ('" + m +
                               "') is not two parts separated by a space");
    merge_key(key, std::string_view(m).substr(0, sp), std::string_view(m).substr(sp + 1));
    ranks_.emplace(key, static_cast<int>(i));  // the first (lowest) rank wins for duplicates
  }
  n_merges_ = merges->size();
}

int BpeTokenizer::merge_rank(std::string_view left, std::string_view right) const {
  thread_local std::string key;
  merge_key(key, left, right);
  auto it = ranks_.find(key);
  return it == ranks_.end() ? -1 : it->second;
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<TokenId> out;
  if (add_special && add_bos_) out.push_back(bos_);
  for (const Fragment& f : partition(text, parse_special)) {
    if (f.token >= 0)
      out.push_back(f.token);
    else
      encode_text(text.substr(f.offset, f.length), out);
  }
  if (add_special && add_eos_) out.push_back(eos_);
  return out;
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<TokenId>& out) const {
  if (raw_utf8_) {
    std::string escaped;
    for (char c : text) c == ' ' ? escaped += "\xE2\x96\x81" : escaped += c;  // U+2581
    for (const std::string& word : pre_tokenizer_->split(escaped)) {
      // A run of newlines that is a token stays whole (llama.cpp's gemma 4 rule).
      if (word.find_first_not_of('\n') == std::string::npos) {
        if (TokenId id = find_token(word); id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      encode_word(word, out);
    }
    return;
  }
  for (const std::string& word : pre_tokenizer_->split(text)) {
    std::string mapped;
    mapped.reserve(word.size() * 2);
    for (char c : word) mapped += unicode::byte_to_unicode(static_cast<uint8_t>(c));
    encode_word(mapped, out);
  }
}

void BpeTokenizer::encode_word(const std::string& word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (pre_tokenizer_->ignore_merges()) {
    if (TokenId id = find_token(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t offs = 0; offs < word.size();) {
    const size_t n = std::min(unicode::utf8_len(word[offs]), word.size() - offs);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offs + n == word.size() ? -1 : index + 1, word.data() + offs, n});
    offs += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view l(symbols[left].text, symbols[left].n);
    const std::string_view r(symbols[right].text, symbols[right].n);
    const int rank = merge_rank(l, r);
    if (rank < 0) return;
    std::string text;
    text.reserve(l.size() + r.size());
    text.append(l).append(r);
    queue.push({left, right, rank, std::move(text)});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.n == 0 || r.n == 0) continue;
    // skip outdated pairs: the two symbols must still spell the merged text
    if (l.n + r.n != b.text.size() || std::string_view(l.text, l.n + r.n) != b.text || l.next != b.right) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i != -1; i = symbols[i].next) {
    const std::string_view piece(symbols[i].text, symbols[i].n);
    if (TokenId id = find_token(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    // No token for this piece: llama.cpp tries each byte of it as a token (gemma4: <0xXX>) and
    // drops the rest.
    for (char c : piece) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", static_cast<unsigned char>(c));
      const TokenId id = raw_utf8_ ? find_token(hex) : find_token(std::string_view(&c, 1));
      if (id >= 0) out.push_back(id);
    }
  }
}

std::string BpeTokenizer::token_to_piece(TokenId id, bool special) const {
  const std::string& text = token_text(id);
  const uint32_t a = attr(id);
  if (a & (kAttrControl | kAttrUnknown)) return special ? text : std::string();
  if (a & kAttrUserDefined) return text;
  if (a & kAttrNormal && raw_utf8_) {  // gemma4: the text itself, U+2581 back to spaces
    std::string piece;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
        piece += ' ';
        i += 2;
      } else {
        piece += text[i];
      }
    }
    return piece;
  }
  if (a & kAttrNormal) {
    std::string piece;
    piece.reserve(text.size());
    for (uint32_t cpt : unicode::decode_utf8(text)) {
      const int byte = unicode::unicode_to_byte(cpt);
      if (byte >= 0) {
        piece += static_cast<char>(byte);
      } else {  // not an image of a byte: llama.cpp's marker
        std::string utf8;
        unicode::append_utf8(utf8, cpt);
        piece += "[UNK_BYTE_0x";
        for (unsigned char c : utf8) {
          char hex[4];
          std::snprintf(hex, sizeof hex, "%02x", c);
          piece += hex;
        }
        piece += text + "]";
      }
    }
    return piece;
  }
  if (a & kAttrByte) {
    if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
      return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
    }
    return text;
  }
  return std::string();
}

}  // namespace kvscope
