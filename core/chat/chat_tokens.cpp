#include "chat/chat_tokens.h"

#include <string>

namespace kvscope {

bool is_special_token(const Tokenizer& tok, TokenId id) {
  if (id < 0 || id >= tok.n_vocab()) return false;
  const TokenType t = tok.token_type(id);
  return t == TokenType::Control || t == TokenType::UserDefined;
}

bool spells_special_token(const Tokenizer& tok, std::string_view text) {
  // Parsing with and without special tokens differs exactly when the text spells one.
  return tok.encode(text, false, true) != tok.encode(text, false, false);
}

std::vector<TokenId> tokenize_chat_pieces(const Tokenizer& tok, const std::vector<ChatPiece>& pieces, TokenId prev) {
  std::vector<TokenId> out;
  std::string run;
  auto append = [&](const std::vector<TokenId>& ids) { out.insert(out.end(), ids.begin(), ids.end()); };
  auto flush = [&] {
    if (run.empty()) return;
    append(tok.encode(run, false, true));
    run.clear();
  };
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string_view text = pieces[i].text;
    // A later turn that opens with a space (plain completion's separator): an SPM vocabulary
    // puts its own space before the text, so that one must not be doubled.
    if (i == 0 && prev >= 0 && tok.add_space_prefix() && !text.empty() && text[0] == ' ') text.remove_prefix(1);
    if (pieces[i].kind != ChatPiece::Kind::Template && spells_special_token(tok, text)) {
      flush();
      append(tok.encode(text, false, false));
    } else {
      run += text;
    }
  }
  flush();
  return out;
}

}  // namespace kvscope
