#pragma once
// Plain values that cross from the engine's thread to the UI thread through queued signals.
// Everything here is immutable once sent (shared_ptr<const ...>) or copied, so no panel ever
// touches state the worker may still be changing.
#include <QMetaType>
#include <QString>
#include <memory>
#include <vector>

#include "chat/chat_conversation.h"
#include "chat/chat_template_choice.h"
#include "engine/engine.h"
#include "telemetry/snapshot.h"

namespace kvscope::ui {

// The model's token pieces, decoded once on the worker so that the UI thread can turn token ids
// into text (block tooltips, prefix tree) without calling into the engine's tokenizer.
struct Vocab {
  std::vector<QString> pieces;  // [n_vocab] display text of each token ("▁" already a space)
  QString piece(TokenId id) const {
    return id >= 0 && static_cast<size_t>(id) < pieces.size() ? pieces[static_cast<size_t>(id)]
                                                              : QStringLiteral("<%1>").arg(id);
  }
  QString text(const TokenId* ids, size_t n) const {
    QString s;
    for (size_t i = 0; i < n; ++i) s += piece(ids[i]);
    return s;
  }
};
using VocabPtr = std::shared_ptr<const Vocab>;

// What the window needs to know about the engine the worker just built.
struct ModelInfo {
  QString path;
  QString description;  // Model::describe()
  QString backend;      // Backend::name()
  QString kvSummary;    // Engine::kv_summary()
  int contextLength = 0;
  int nVocab = 0;
  int nLayer = 0, nHeadKv = 0, headDim = 0;  // the KV shape: bytes per token for any dtype
  VocabPtr vocab;
  EngineConfig config;      // the config the engine was built with
  ModelConfig modelConfig;  // the model's own config (what the settings are validated against)
  QString chatTemplate;     // ChatTemplateChoice::describe(): the template chat turns use
  QString chatTemplateWarning;
  ChatTemplateChoice chatTemplateChoice;  // how chat turns and served chat requests are written
  // The loaded model itself, read-only: the Serve toggle's HTTP threads tokenize with it.
  std::shared_ptr<const Model> model;
};

// One finished request as a chat turn reports it.
struct TurnStats {
  SeqId id = -1;
  quint64 tag = 0;  // the submitter's tag (0: not submitted by a chat)
  int promptTokens = 0;
  int cachedTokens = 0;  // prompt tokens reused from the prefix cache
  int generated = 0;
  double ttftMs = -1;
  double tokensPerS = 0;  // decode rate, from the snapshot's mean inter-token latency
  int preemptions = 0;
  QString state;  // "finished", "cancelled", "rejected"
  QString error;
  std::vector<TokenId> tokens;  // prompt + generated: the next chat turn's prefix
  // A reasoning reply (the request parsed it): its thinking's tokens and the KV blocks holding
  // them, from the request's story; -1 when the reply was not parsed.
  int reasoningTokens = -1;
  int reasoningBlocks = 0;
  bool reasoningClosed = true;
  // A chat turn's prompt as it was built (its rendered text for the next turn, any note on
  // how: a re-rendered conversation, a template that failed); null for other requests.
  std::shared_ptr<const ChatTurnPrompt> chatTurn;
};

// Events of all steps since the previous delivered snapshot (the UI takes one snapshot per
// display frame, so one snapshot may stand for several steps; their events are all kept).
using EventBatch = std::shared_ptr<const std::vector<BlockEvent>>;

}  // namespace kvscope::ui

Q_DECLARE_METATYPE(kvscope::SnapshotPtr)
Q_DECLARE_METATYPE(kvscope::ui::EventBatch)
Q_DECLARE_METATYPE(kvscope::ui::ModelInfo)
Q_DECLARE_METATYPE(kvscope::ui::TurnStats)
