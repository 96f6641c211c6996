#include "model/test_vocab_tokenizer.h"

#include <algorithm>
#include <cstdio>

namespace kvscope {

std::vector<TokenId> TestVocabTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  constexpr size_t kChunk = 5;
  std::vector<TokenId> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  const auto n_vocab = static_cast<uint64_t>(tokens_.size());
  for (const Fragment& f : partition(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    for (size_t pos = f.offset; pos < f.offset + f.length; pos += kChunk) {
      uint64_t hash = 0;
      for (size_t i = pos; i < std::min(pos + kChunk, f.offset + f.length); ++i)
        hash = hash * 31 + static_cast<uint8_t>(text[i]);
      out.push_back(static_cast<TokenId>(hash % n_vocab));
    }
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string TestVocabTokenizer::token_to_piece(TokenId id, bool /*special*/) const {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%x", static_cast<unsigned>(id));
  return buf;
}

}  // namespace kvscope
