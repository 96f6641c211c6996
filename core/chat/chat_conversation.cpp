#include "chat/chat_conversation.h"

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "chat/chat_tokens.h"

namespace kvscope {

std::vector<TokenId> chat_turn_prompt(const Tokenizer& tok, ChatTemplateKind kind, const std::string& system,
                                      const std::vector<TokenId>& history, const std::string& user_text) {
  if (history.empty()) {
    std::vector<ChatMessage> msgs;
    if (!system.empty()) msgs.push_back({"system", system});
    msgs.push_back({"user", user_text});
    std::vector<TokenId> out;
    if (tok.add_bos() && tok.bos() >= 0) out.push_back(tok.bos());
    const std::vector<TokenId> ids = tokenize_chat_pieces(tok, render_chat(kind, msgs, true), -1);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }
  // Everything up to and including the last reply is already in `history`, as the model
  // generated it; only what the template puts after a reply is new. A stand-in earlier turn
  // gives the template its context (whether a reply came before, where [INST] blocks end).
  const std::vector<ChatMessage> msgs = {{"user", "."}, {"assistant", ""}, {"user", user_text}};
  const std::vector<ChatPiece> pieces = render_chat(kind, msgs, true);
  auto reply =
      std::find_if(pieces.begin(), pieces.end(), [](const ChatPiece& p) { return p.kind == ChatPiece::Kind::Reply; });
  if (reply == pieces.end()) throw std::logic_error("chat template rendered no reply piece");
  const std::vector<ChatPiece> tail(reply + 1, pieces.end());
  std::vector<TokenId> ids = tokenize_chat_pieces(tok, tail, history.back());
  // The reply usually ended with the template's end-of-turn token itself (it is a stop token):
  // then the template's copy of it is already there.
  if (!ids.empty() && ids.front() == history.back() && is_special_token(tok, ids.front())) ids.erase(ids.begin());
  std::vector<TokenId> out = history;
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::vector<TokenId> chat_stop_tokens(const Tokenizer& tok, ChatTemplateKind kind) {
  std::vector<TokenId> out;
  if (tok.eos() >= 0) out.push_back(tok.eos());
  const std::string_view eot = chat_end_of_turn_text(kind);
  if (!eot.empty()) {
    const TokenId id = tok.find_token(eot);
    if (id >= 0 && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

std::vector<TokenId> chat_stop_tokens(const Tokenizer& tok, const ChatTemplateChoice& choice) {
  std::vector<TokenId> out = chat_stop_tokens(tok, choice.kind);
  if (!choice.uses_jinja()) return out;
  for (TokenId id : tok.eog_ids())
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  return out;
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Where the new turn starts in `now`: after the previous prompt's text `prev` and the reply the
// template wrote after it (as generated, or trimmed, as many templates write contents).
// npos when `now` does not continue `prev` with the reply: the template rewrote earlier turns.
size_t new_turn_offset(std::string_view now, std::string_view prev, std::string_view reply) {
  if (now.substr(0, prev.size()) != prev) return std::string_view::npos;
  const std::string_view rest = now.substr(prev.size());
  if (rest.substr(0, reply.size()) == reply) return prev.size() + reply.size();
  const std::string_view trimmed = strip(reply);
  size_t k = 0;
  while (k < rest.size() && is_space(rest[k])) ++k;
  if (rest.substr(k, trimmed.size()) == trimmed) return prev.size() + k + trimmed.size();
  return std::string_view::npos;
}

std::vector<ChatMessage> with_system(const std::string& system, const std::vector<ChatMessage>& messages) {
  std::vector<ChatMessage> out;
  if (!system.empty()) out.push_back({"system", system});
  out.insert(out.end(), messages.begin(), messages.end());
  return out;
}

// The Jinja path of chat_next_turn; throws ChatTemplateError when the template fails.
void jinja_turn(const Tokenizer& tok, const ChatTemplateChoice& choice, const std::string& system,
                const ChatHistory& history, const ChatTemplateVars& extra, ChatTurnPrompt& t) {
  std::vector<ChatMessage> msgs = with_system(system, history.messages);
  msgs.push_back({"user", t.user_text});
  t.rendered = render_chat_jinja(choice, tok, msgs, true, extra);
  if (history.empty()) {
    t.tokens = tokenize_chat_rendered(tok, choice, t.rendered);
    return;
  }
  const bool replied = !history.messages.empty() && history.messages.back().role == "assistant";
  ChatRendered prev = history.rendered;
  if (prev.text.empty() && replied) {  // not recorded (a turn the built-in family wrote): render it again
    msgs.resize(msgs.size() - 2);
    prev = render_chat_jinja(choice, tok, msgs, true, extra);
  }
  const size_t at = new_turn_offset(t.rendered.text, prev.text, replied ? history.messages.back().content : "");
  if (prev.text.empty() || at == std::string_view::npos) {
    t.rerendered = true;
    t.tokens = tokenize_chat_rendered(tok, choice, t.rendered);
    t.note =
        "the chat template wrote the earlier turns differently than the previous prompt did (it may drop earlier "
        "reasoning, or print the date), so the whole conversation was tokenized afresh: the prefix cache hits "
        "only up to the first token that changed";
    return;
  }
  std::vector<TokenId> ids = tokenize_chat_pieces(tok, chat_rendered_pieces(t.rendered, at), history.tokens.back());
  // The reply usually ended with the template's end-of-turn token itself (a stop token).
  if (!ids.empty() && ids.front() == history.tokens.back() && is_special_token(tok, ids.front()))
    ids.erase(ids.begin());
  t.tokens = history.tokens;
  t.tokens.insert(t.tokens.end(), ids.begin(), ids.end());
}

}  // namespace

ChatTurnPrompt chat_next_turn(const Tokenizer& tok, const ChatTemplateChoice& choice, const std::string& system,
                              const ChatHistory& history, const std::string& user_text, const ChatTemplateVars& extra) {
  ChatTurnPrompt t;
  t.user_text = user_text;
  t.reasoning.format = choice.reasoning;
  if (choice.uses_jinja()) {
    try {
      jinja_turn(tok, choice, system, history, extra, t);
      t.reasoning.start = reply_start(choice.reasoning, t.rendered.text);
      return t;
    } catch (const ChatTemplateError& e) {
      t = ChatTurnPrompt{};
      t.user_text = user_text;
      t.reasoning.format = choice.reasoning;
      t.fell_back = true;
      t.note = std::string(e.what()) + "; this turn is written in the built-in " + chat_template_name(choice.kind) +
               " template instead";
    }
  }
  t.tokens = chat_turn_prompt(tok, choice.kind, system, history.tokens, user_text);
  return t;
}

void chat_commit(ChatHistory& history, const ChatTurnPrompt& turn, const std::string& reply_text,
                 std::vector<TokenId> sequence, std::optional<std::string> reasoning) {
  if (sequence.size() < turn.tokens.size() || !std::equal(turn.tokens.begin(), turn.tokens.end(), sequence.begin()))
    throw std::invalid_argument("chat: the turn's tokens do not start with its prompt");
  history.messages.push_back({"user", turn.user_text});
  history.messages.push_back({"assistant", reply_text, std::move(reasoning)});
  history.tokens = std::move(sequence);
  history.rendered = turn.rendered;
}

ChatConversation::ChatConversation(const Tokenizer& tok, ChatTemplateKind kind) : tok_(tok) { choice_.kind = kind; }

ChatConversation::ChatConversation(const Tokenizer& tok, ChatTemplateChoice choice)
    : tok_(tok), choice_(std::move(choice)) {}

void ChatConversation::set_system(std::string text) {
  system_ = std::move(text);
  reset();
}

void ChatConversation::reset() { history_ = ChatHistory{}; }

void ChatConversation::commit(const std::string& user_text, const std::string& reply_text,
                              std::vector<TokenId> sequence) {
  const std::vector<TokenId>& so_far = history_.tokens;
  if (sequence.size() < so_far.size() || !std::equal(so_far.begin(), so_far.end(), sequence.begin()))
    throw std::invalid_argument("chat: the turn's tokens do not continue the conversation");
  history_.messages.push_back({"user", user_text});
  history_.messages.push_back({"assistant", reply_text});
  history_.tokens = std::move(sequence);
  history_.rendered = ChatRendered{};  // the next turn renders the previous prompt again
}

}  // namespace kvscope
