#pragma once
// SentencePiece-style tokenizer ("llama" vocabularies), following llama.cpp's llm_tokenizer_spm:
// spaces become U+2581 "▁" (with one prepended to each text fragment), then adjacent symbols are merged
// by highest token score; pieces that are no token fall back to <0xXX> byte tokens.
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace kvscope {

class SpmTokenizer final : public Tokenizer {
 public:
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::string token_to_piece(TokenId id, bool special = false) const override;

 protected:
  void configure(const GgufFile& file) override;

 private:
  // Tokenizes one raw-text fragment whose spaces are already escaped.
  void encode_escaped(const std::string& text, std::vector<TokenId>& out) const;
  TokenId byte_token(uint8_t byte) const;

  std::array<TokenId, 256> byte_tokens_{};  // <0xXX> (or the byte itself as a token), -1 when absent
};

}  // namespace kvscope
