#pragma once
// What the engine's thread reports about its engine, in the UI's types: the display text of
// every token, a finished request's figures, a request's KV story as sentences. Pure functions
// of the engine's state, called on the worker's thread.
#include "engine/engine.h"
#include "engine_bridge/request_story_types.h"
#include "engine_bridge/ui_types.h"
#include "model/model.h"

namespace kvscope::ui {

// Display text of every token: control tokens spelled out, byte tokens as <0xNN>, so that a
// tooltip never shows half a UTF-8 character.
VocabPtr build_vocab(const Model& m);
// The figures of request `id` from `snap` (its sequence table), or from the engine itself when
// the snapshot does not show it (cancelled between steps). Tag and tokens are the caller's.
TurnStats turn_stats(const Engine& engine, SeqId id, const Snapshot* snap);
// The story of request `id` (engine/request_story.h) as sentences; found is false when the
// engine (null: none yet) has none.
StoryText story_text(const Engine* engine, const VocabPtr& vocab, qint64 id);

}  // namespace kvscope::ui
