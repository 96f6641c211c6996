#pragma once
// llama.cpp's "test" vocabulary (LLAMA_VOCAB_TYPE_TEST), the dummy tokenizer of the random-weight
// models its test-llama-archs writes (../shared/golden/archs): raw text is cut into 5-byte
// chunks, each hashed (h = h * 31 + byte) modulo the vocabulary size; a token prints as its id
// in hex. Such models are driven by token ids; this makes them load and run like any other.
#include "model/tokenizer.h"

namespace kvscope {

class TestVocabTokenizer final : public Tokenizer {
 public:
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const override;
  std::string token_to_piece(TokenId id, bool special = false) const override;
};

}  // namespace kvscope
