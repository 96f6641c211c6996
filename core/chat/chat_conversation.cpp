#include "chat/chat_conversation.h"

#include <algorithm>
#include <stdexcept>

#include "chat/chat_tokens.h"

namespace kvscope {

ChatConversation::ChatConversation(const Tokenizer& tok, ChatTemplateKind kind) : tok_(tok), kind_(kind) {}

void ChatConversation::set_system(std::string text) {
  system_ = std::move(text);
  reset();
}

void ChatConversation::reset() {
  messages_.clear();
  tokens_.clear();
}

std::vector<ChatMessage> ChatConversation::with_system(std::vector<ChatMessage> msgs) const {
  if (!system_.empty()) msgs.insert(msgs.begin(), ChatMessage{"system", system_});
  return msgs;
}

std::vector<TokenId> ChatConversation::prompt_for(const std::string& user_text) const {
  std::vector<ChatMessage> msgs = messages_;
  msgs.push_back({"user", user_text});
  const std::vector<ChatPiece> pieces = render_chat(kind_, with_system(std::move(msgs)), true);

  if (tokens_.empty()) {
    std::vector<TokenId> out;
    if (tok_.add_bos() && tok_.bos() >= 0) out.push_back(tok_.bos());
    const std::vector<TokenId> ids = tokenize_chat_pieces(tok_, pieces, -1);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }
  // Everything up to and including the last reply is already in tokens_ (the reply as the
  // model generated it); only what follows that reply is new.
  auto last_reply = std::find_if(pieces.rbegin(), pieces.rend(),
                                 [](const ChatPiece& p) { return p.kind == ChatPiece::Kind::Reply; });
  const std::vector<ChatPiece> tail(last_reply.base(), pieces.end());
  std::vector<TokenId> ids = tokenize_chat_pieces(tok_, tail, tokens_.back());
  // The reply usually ended with the template's end-of-turn token itself (it is a stop token):
  // then the template's copy of it is already there.
  if (!ids.empty() && ids.front() == tokens_.back() && is_special_token(tok_, ids.front())) ids.erase(ids.begin());
  std::vector<TokenId> out = tokens_;
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

void ChatConversation::commit(const std::string& user_text, const std::string& reply_text, std::vector<TokenId> sequence) {
  if (sequence.size() < tokens_.size() || !std::equal(tokens_.begin(), tokens_.end(), sequence.begin()))
    throw std::invalid_argument("chat: the turn's tokens do not continue the conversation");
  messages_.push_back({"user", user_text});
  messages_.push_back({"assistant", reply_text});
  tokens_ = std::move(sequence);
}

std::vector<TokenId> ChatConversation::stop_tokens() const {
  std::vector<TokenId> out;
  if (tok_.eos() >= 0) out.push_back(tok_.eos());
  const std::string_view eot = chat_end_of_turn_text(kind_);
  if (!eot.empty()) {
    const TokenId id = tok_.find_token(eot);
    if (id >= 0 && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

}  // namespace kvscope
