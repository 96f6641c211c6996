#pragma once
// What the engine's thread streams of each engine sequence until it finishes: its tokens so
// far (prompt + generated), the UTF-8 decoder of its text and its submitter's tag, and the
// decoded text not yet sent to the UI, per sequence, in the order it became available.
// A chat turn of a reasoning model has its reply split here (core/chat/reasoning_parser.h):
// its reasoning is queued apart from its content, with how many tokens it has taken so far.
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
#include "chat/reasoning_parser.h"
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
    ReasoningParser parser;                          // all content unless the turn parses reasoning
    int reasoningTokens = 0;                         // generated tokens that were reasoning so far
  };
  // New text of one sequence: content, and reasoning with the reasoning's token count so far.
  struct Text {
    SeqId id = -1;
    std::string content, reasoning;
    int reasoningTokens = 0;
  };

  Stream& open(SeqId id) { return streams_[id]; }
  // A chat turn's stream: its reply is parsed as the turn says (ChatTurnPrompt::reasoning).
  Stream& openChat(SeqId id, std::shared_ptr<const ChatTurnPrompt> turn);
  // A new token of sequence `id`: kept and its text queued (nothing when `id` is not streamed).
  void onToken(SeqId id, TokenId tok, const Tokenizer* tokenizer);
  std::vector<SeqId> ids() const;
  // Takes finished sequence `id` out, its decoder's last text queued; nullopt when not streamed.
  std::optional<Stream> finish(SeqId id);
  // Every stream, leaving none (the engine was rebuilt).
  std::unordered_map<SeqId, Stream> takeAll();
  // Hands the queued text of `only` (-1: every sequence) to `send`, in order, and drops it.
  void flushText(const std::function<void(const Text&)>& send, SeqId only = -1);

 private:
  void queueText(SeqId id, const ReasoningDelta& d, int reasoningTokens);
  std::unordered_map<SeqId, Stream> streams_;
  std::vector<Text> pendingText_;
};

}  // namespace kvscope::ui
