#pragma once
// A multi-turn conversation kept as token ids, so that every turn's prompt starts with the
// previous turn's tokens exactly (prompt + reply as generated) and the prefix cache hands their
// full blocks back. Re-tokenizing the re-rendered transcript would not guarantee that: the
// generated ids need not be how the tokenizer would spell the same text, and the first
// difference would end the cache hits there. So only the new text is tokenized and appended.
//
// With a Jinja template (the model's own, or --chat-template FILE) the whole conversation is
// rendered every turn, and the new turn is what follows the previous prompt's text and the
// reply in it. When the template writes the earlier turns differently than before (a template
// that drops earlier reasoning, or puts the current date in the system text), there is no such
// suffix: the prompt is then the whole rendering tokenized afresh, as the template means it,
// and the prefix cache hits only up to the first token that changed (ChatTurnPrompt::rerendered).
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_jinja.h"
#include "chat/chat_template.h"
#include "chat/chat_template_choice.h"
#include "model/tokenizer.h"

namespace kvscope {

// The prompt of the turn that follows `history` (every token of the earlier turns exactly as the
// engine held them; empty for the first turn), written by a built-in family: history, then what
// closes the last reply (e.g. "<|im_end|>\n" unless the reply already ended with that token),
// the user turn and the generation prompt. The first turn starts with BOS when the vocabulary
// asks for it and carries the system text. What follows a reply does not depend on earlier
// contents in any built-in template, so callers need only the tokens, not the transcript.
std::vector<TokenId> chat_turn_prompt(const Tokenizer& tok, ChatTemplateKind kind, const std::string& system,
                                      const std::vector<TokenId>& history, const std::string& user_text);
// Tokens that end a reply: EOS and the template's end-of-turn token when the vocabulary has them.
std::vector<TokenId> chat_stop_tokens(const Tokenizer& tok, ChatTemplateKind kind);
// With a Jinja template, also every end-of-generation token of the vocabulary (<|im_end|>,
// <|eot_id|>, <end_of_turn>, ...): the template's own end of turn is among them.
std::vector<TokenId> chat_stop_tokens(const Tokenizer& tok, const ChatTemplateChoice& choice);

// A conversation as the next turn needs it: the messages so far (user, assistant, ...; the
// system text apart), every token the engine held for them, and the Jinja text the last prompt
// was rendered to ("" when a built-in family wrote it).
struct ChatHistory {
  std::vector<ChatMessage> messages;
  std::vector<TokenId> tokens;
  ChatRendered rendered;
  bool empty() const { return tokens.empty(); }
};

struct ChatTurnPrompt {
  std::string user_text;
  std::vector<TokenId> tokens;  // the prompt
  ChatRendered rendered;        // Jinja: this prompt's text (the next turn compares against it)
  // The Jinja template wrote the earlier turns differently than the previous prompt did, so the
  // prompt is the whole conversation tokenized afresh rather than `history.tokens` + the new turn.
  bool rerendered = false;
  bool fell_back = false;  // the Jinja template failed; the built-in family wrote this turn
  std::string note;        // what to tell the user about either (empty: nothing unusual)
  // How the reply splits into reasoning and content: the choice's format, and whether this
  // prompt's tail already opened (or closed) the reasoning block.
  ReasoningSetup reasoning;
};

// The next turn's prompt through `choice`: its Jinja template when it has one, else (or when
// the template fails on this conversation: `fell_back`, with the reason in `note`) the
// built-in family. `extra` holds extra template variables (e.g. {"enable_thinking": false}).
// Throws ChatTemplateError only when the built-in family cannot write the turn either.
ChatTurnPrompt chat_next_turn(const Tokenizer& tok, const ChatTemplateChoice& choice, const std::string& system,
                              const ChatHistory& history, const std::string& user_text,
                              const ChatTemplateVars& extra = nullptr);
// The history after `turn`: `sequence` is every token the engine held for it, prompt then reply.
// `reply_text` is the reply as streamed, or, with `reasoning` given, its content apart from its
// reasoning (the assistant message then carries both, as a client sends them back).
// Throws std::invalid_argument when `sequence` does not start with the turn's prompt.
void chat_commit(ChatHistory& history, const ChatTurnPrompt& turn, const std::string& reply_text,
                 std::vector<TokenId> sequence, std::optional<std::string> reasoning = std::nullopt);

// A conversation's state for a terminal or a test: the tokens so far and the transcript.
class ChatConversation {
 public:
  ChatConversation(const Tokenizer& tok, ChatTemplateKind kind);
  ChatConversation(const Tokenizer& tok, ChatTemplateChoice choice);

  ChatTemplateKind kind() const { return choice_.kind; }
  const ChatTemplateChoice& choice() const { return choice_; }
  // Sets the system text; it leads the first turn, so the conversation starts over.
  void set_system(std::string text);
  const std::string& system() const { return system_; }
  void reset();  // forget every turn (the system text stays)

  // The next turn (chat_next_turn on this conversation).
  ChatTurnPrompt next_turn(const std::string& user_text, const ChatTemplateVars& extra = nullptr) const {
    return chat_next_turn(tok_, choice_, system_, history_, user_text, extra);
  }
  // The next turn's prompt; unless the Jinja template re-rendered earlier turns, it starts
  // with tokens() exactly.
  std::vector<TokenId> prompt_for(const std::string& user_text) const { return next_turn(user_text).tokens; }
  // Records a finished (or stopped) turn: `sequence` is every token the engine held for it,
  // prompt then reply. Throws std::invalid_argument when it does not continue tokens().
  void commit(const std::string& user_text, const std::string& reply_text, std::vector<TokenId> sequence);
  // The same for a turn from next_turn(): `sequence` must start with turn.tokens.
  void commit(const ChatTurnPrompt& turn, const std::string& reply_text, std::vector<TokenId> sequence,
              std::optional<std::string> reasoning = std::nullopt) {
    chat_commit(history_, turn, reply_text, std::move(sequence), std::move(reasoning));
  }

  const std::vector<TokenId>& tokens() const { return history_.tokens; }
  const std::vector<ChatMessage>& messages() const { return history_.messages; }  // without the system text
  const ChatHistory& history() const { return history_; }
  int turns() const { return static_cast<int>(history_.messages.size() / 2); }
  std::vector<TokenId> stop_tokens() const { return chat_stop_tokens(tok_, choice_); }

 private:
  const Tokenizer& tok_;
  ChatTemplateChoice choice_;
  std::string system_;
  ChatHistory history_;
};

}  // namespace kvscope
