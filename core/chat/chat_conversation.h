#pragma once
// A multi-turn conversation kept as token ids, so that every turn's prompt starts with the
// previous turn's tokens exactly (prompt + reply as generated) and the prefix cache hands their
// full blocks back. Re-tokenizing the re-rendered transcript would not guarantee that: the
// generated ids need not be how the tokenizer would spell the same text, and the first
// difference would end the cache hits there. So only the new text is tokenized and appended.
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "model/tokenizer.h"

namespace kvscope {

// The prompt of the turn that follows `history` (every token of the earlier turns exactly as the
// engine held them; empty for the first turn): history, then what closes the last reply (e.g.
// "<|im_end|>\n" unless the reply already ended with that token), the user turn and the
// generation prompt. The first turn starts with BOS when the vocabulary asks for it and carries
// the system text. What follows a reply does not depend on earlier contents in any built-in
// template, so callers need only the tokens, not the transcript.
std::vector<TokenId> chat_turn_prompt(const Tokenizer& tok, ChatTemplateKind kind, const std::string& system,
                                      const std::vector<TokenId>& history, const std::string& user_text);
// Tokens that end a reply: EOS and the template's end-of-turn token when the vocabulary has them.
std::vector<TokenId> chat_stop_tokens(const Tokenizer& tok, ChatTemplateKind kind);

// A conversation's state for a terminal or a test: the tokens so far and the transcript.
class ChatConversation {
 public:
  ChatConversation(const Tokenizer& tok, ChatTemplateKind kind);

  ChatTemplateKind kind() const { return kind_; }
  // Sets the system text; it leads the first turn, so the conversation starts over.
  void set_system(std::string text);
  const std::string& system() const { return system_; }
  void reset();  // forget every turn (the system text stays)

  // The next turn's prompt (chat_turn_prompt on tokens()); it starts with tokens() exactly.
  std::vector<TokenId> prompt_for(const std::string& user_text) const {
    return chat_turn_prompt(tok_, kind_, system_, tokens_, user_text);
  }
  // Records a finished (or stopped) turn: `sequence` is every token the engine held for it,
  // prompt then reply. Throws std::invalid_argument when it does not continue tokens().
  void commit(const std::string& user_text, const std::string& reply_text, std::vector<TokenId> sequence);

  const std::vector<TokenId>& tokens() const { return tokens_; }
  const std::vector<ChatMessage>& messages() const { return messages_; }  // without the system text
  int turns() const { return static_cast<int>(messages_.size() / 2); }
  std::vector<TokenId> stop_tokens() const { return chat_stop_tokens(tok_, kind_); }

 private:
  const Tokenizer& tok_;
  ChatTemplateKind kind_;
  std::string system_;
  std::vector<ChatMessage> messages_;  // user, assistant, user, assistant, ...
  std::vector<TokenId> tokens_;        // every token of the committed turns
};

}  // namespace kvscope
