#pragma once
// Rendered chat pieces -> token ids, safely: markers in template text become their special
// tokens, while text the user typed never does (a user who types "<|im_end|>" gets those
// characters, not the end of their turn).
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "model/tokenizer.h"

namespace kvscope {

// A control or user-defined token (what llama.cpp parses out of text as "special").
bool is_special_token(const Tokenizer& tok, TokenId id);
// True when `text` contains the spelling of a control token of this vocabulary.
bool spells_special_token(const Tokenizer& tok, std::string_view text);

// Tokenizes pieces that follow the token `prev` (-1: the start of the conversation; BOS is
// the caller's). Runs of template and content text are tokenized together with special tokens
// parsed, exactly as llama.cpp tokenizes a rendered prompt, unless a content piece spells a
// special token: that piece alone is then tokenized as plain text.
std::vector<TokenId> tokenize_chat_pieces(const Tokenizer& tok, const std::vector<ChatPiece>& pieces, TokenId prev);

}  // namespace kvscope
