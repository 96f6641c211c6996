#pragma once
// The one interface of every panel that shows the engine's snapshots. MainWindow keeps a list
// of them and fans each delivered snapshot out through it, so a new panel is one file (a widget
// that implements this) plus one registration line in MainWindow (addPanel).
#include "engine_bridge/ui_types.h"

namespace kvscope::ui {

class SnapshotView {
 public:
  virtual ~SnapshotView() = default;
  // Called on the UI thread with the newest snapshot and the block events of every step since
  // the previous one (snapshots are coalesced, events are not; either may be null). The
  // snapshot is immutable and shared: a panel may keep the pointer to paint from later, and
  // must return quickly (store, schedule a repaint), since every panel runs in one frame.
  virtual void showSnapshot(const SnapshotPtr& snap, const EventBatch& events) = 0;
  // A new engine was built (a model load or new settings): drop the old engine's history and
  // take what the panel needs from the new one (vocabulary, context length...).
  virtual void resetForEngine(const ModelInfo& info) { (void)info; }
};

}  // namespace kvscope::ui
