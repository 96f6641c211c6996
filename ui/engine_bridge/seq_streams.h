#pragma once
// What the engine's thread streams of each engine sequence until it finishes: its tokens so
// far (prompt + generated), the UTF-8 decoder of its text and its submitter's tag, and the
// decoded text not yet sent to the UI, per sequence, in the order it became available.
// A plain class, used on the worker's thread only.
#include <QString>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chat/chat_conversation.h"
#include "model/tokenizer.h"
#include "kv/kv_types.h"

namespace kvscope::ui {

class SeqStreams {
 public:
  struct Stream {
    std::vector<TokenId> tokens;
    Utf8StreamDecoder decoder;
    quint64 tag = 0;
    std::shared_ptr<const ChatTurnPrompt> chatTurn;  // a chat turn's prompt as built
  };

  Stream& open(SeqId id) { return streams_[id]; }
  // A new token of sequence `id`: kept and its text queued (nothing when `id` is not streamed).
  void onToken(SeqId id, TokenId tok, const Tokenizer* tokenizer);
  std::vector<SeqId> ids() const;
  // Takes finished sequence `id` out, its decoder's last text queued; nullopt when not streamed.
  std::optional<Stream> finish(SeqId id);
  // Every stream, leaving none (the engine was rebuilt).
  std::unordered_map<SeqId, Stream> takeAll();
  // Hands the queued text of `only` (-1: every sequence) to `send`, in order, and drops it.
  void flushText(const std::function<void(SeqId, const QString&)>& send, SeqId only = -1);

 private:
  void queueText(SeqId id, std::string text);
  std::unordered_map<SeqId, Stream> streams_;
  std::vector<std::pair<SeqId, std::string>> pendingText_;
};

}  // namespace kvscope::ui
