#include "engine_bridge/seq_streams.h"

namespace kvscope::ui {

void SeqStreams::onToken(SeqId id, TokenId tok, const Tokenizer* tokenizer) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  it->second.tokens.push_back(tok);
  queueText(id, it->second.decoder.push(tokenizer ? tokenizer->token_to_piece(tok) : ""));
}

std::vector<SeqId> SeqStreams::ids() const {
  std::vector<SeqId> ids;
  for (const auto& [id, s] : streams_) ids.push_back(id);
  return ids;
}

std::optional<SeqStreams::Stream> SeqStreams::finish(SeqId id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return std::nullopt;
  queueText(id, it->second.decoder.flush());
  Stream s = std::move(it->second);
  streams_.erase(it);
  return s;
}

std::unordered_map<SeqId, SeqStreams::Stream> SeqStreams::takeAll() {
  std::unordered_map<SeqId, Stream> all;
  all.swap(streams_);
  return all;
}

void SeqStreams::queueText(SeqId id, std::string text) {
  if (text.empty()) return;
  for (auto& [seq, pending] : pendingText_)
    if (seq == id) {
      pending += text;
      return;
    }
  pendingText_.emplace_back(id, std::move(text));
}

void SeqStreams::flushText(const std::function<void(SeqId, const QString&)>& send, SeqId only) {
  for (auto it = pendingText_.begin(); it != pendingText_.end();) {
    if (only >= 0 && it->first != only) {
      ++it;
      continue;
    }
    send(it->first, QString::fromUtf8(it->second));
    it = pendingText_.erase(it);
  }
}

}  // namespace kvscope::ui
