#include "chat/chat_conversation.h"

#include <algorithm>
#include <stdexcept>

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

ChatConversation::ChatConversation(const Tokenizer& tok, ChatTemplateKind kind) : tok_(tok), kind_(kind) {}

void ChatConversation::set_system(std::string text) {
  system_ = std::move(text);
  reset();
}

void ChatConversation::reset() {
  messages_.clear();
  tokens_.clear();
}

void ChatConversation::commit(const std::string& user_text, const std::string& reply_text,
                              std::vector<TokenId> sequence) {
  if (sequence.size() < tokens_.size() || !std::equal(tokens_.begin(), tokens_.end(), sequence.begin()))
    throw std::invalid_argument("chat: the turn's tokens do not continue the conversation");
  messages_.push_back({"user", user_text});
  messages_.push_back({"assistant", reply_text});
  tokens_ = std::move(sequence);
}

}  // namespace kvscope
