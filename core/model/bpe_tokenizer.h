#pragma once
// Byte-level BPE tokenizer ("gpt2" vocabularies), following llama.cpp's llm_tokenizer_bpe: a
// pre-tokenizer (chosen by tokenizer.ggml.pre) splits the text into words, every byte of a word is
// mapped to its GPT-2 code point, and the lowest-ranked merges (tokenizer.ggml.merges) are applied.
// "gemma4" vocabularies run the same merges over the raw UTF-8 instead: spaces become U+2581 as in
// SentencePiece, the text is split at newlines only, and a piece with no token falls back to
// <0xXX> byte tokens.
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/pretokenizer.h"
#include "model/tokenizer.h"

namespace kvscope {

class BpeTokenizer final : public Tokenizer {
 public:
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::string token_to_piece(TokenId id, bool special = false) const override;

  const PreTokenizer& pre_tokenizer() const { return *pre_tokenizer_; }
  size_t n_merges() const { return n_merges_; }

 protected:
  void configure(const GgufFile& file) override;

 private:
  void encode_text(std::string_view text, std::vector<TokenId>& out) const;
  void encode_word(const std::string& word, std::vector<TokenId>& out) const;  // word already byte-mapped
  int merge_rank(std::string_view left, std::string_view right) const;         // -1 when no such merge

  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> ranks_;  // key: merge_key(left, right)
  size_t n_merges_ = 0;
  bool raw_utf8_ = false;  // gemma4: no GPT-2 byte mapping, spaces escaped, <0xXX> byte fallback
};

}  // namespace kvscope
