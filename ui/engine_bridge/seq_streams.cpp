#include "engine_bridge/seq_streams.h"

namespace kvscope::ui {

SeqStreams::Stream& SeqStreams::openChat(SeqId id, std::shared_ptr<const ChatTurnPrompt> turn) {
  Stream& s = streams_[id];
  if (turn) s.parser = ReasoningParser(turn->reasoning);
  s.chatTurn = std::move(turn);
  return s;
}

void SeqStreams::onToken(SeqId id, TokenId tok, const Tokenizer* tokenizer) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  s.tokens.push_back(tok);
  const ReasoningFormat f = s.chatTurn ? s.chatTurn->reasoning.format : ReasoningFormat::None;
  const std::string piece = tokenizer ? reasoning_piece(*tokenizer, tok, f) : std::string();
  const ReasoningParser::Part before = s.parser.part();
  const ReasoningDelta d = s.parser.feed(s.decoder.push(piece));
  if (before == ReasoningParser::Part::Reasoning || s.parser.part() == ReasoningParser::Part::Reasoning)
    ++s.reasoningTokens;
  queueText(id, d, s.reasoningTokens);
}

std::vector<SeqId> SeqStreams::ids() const {
  std::vector<SeqId> ids;
  for (const auto& [id, s] : streams_) ids.push_back(id);
  return ids;
}

std::optional<SeqStreams::Stream> SeqStreams::finish(SeqId id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return std::nullopt;
  Stream& s = it->second;
  ReasoningDelta d = s.parser.feed(s.decoder.flush());
  const ReasoningDelta rest = s.parser.finish();
  d.reasoning += rest.reasoning;
  d.content += rest.content;
  queueText(id, d, s.reasoningTokens);
  Stream out = std::move(s);
  streams_.erase(it);
  return out;
}

std::unordered_map<SeqId, SeqStreams::Stream> SeqStreams::takeAll() {
  std::unordered_map<SeqId, Stream> all;
  all.swap(streams_);
  return all;
}

void SeqStreams::queueText(SeqId id, const ReasoningDelta& d, int reasoningTokens) {
  if (d.empty()) return;
  for (Text& pending : pendingText_)
    if (pending.id == id) {
      pending.content += d.content;
      pending.reasoning += d.reasoning;
      pending.reasoningTokens = reasoningTokens;
      return;
    }
  pendingText_.push_back({id, d.content, d.reasoning, reasoningTokens});
}

void SeqStreams::flushText(const std::function<void(const Text&)>& send, SeqId only) {
  for (auto it = pendingText_.begin(); it != pendingText_.end();) {
    if (only >= 0 && it->id != only) {
      ++it;
      continue;
    }
    send(*it);
    it = pendingText_.erase(it);
  }
}

}  // namespace kvscope::ui
