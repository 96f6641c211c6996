#pragma once
// The story view: one request's KV story (engine/request_story.h) as a short timeline of plain
// sentences, each with the step it happened in. A request is chosen by clicking it in the
// requests table, a block of the block map (its owner), a row of the block map's sequence list
// or the "story" link under a chat turn.
// Clicking a sentence jumps the block map to that step's snapshot, from a bounded history of
// the snapshots the window received (the nearest kept one when that step was coalesced away
// or has left the history; the next live frame replaces it while the engine runs).
#include <QElapsedTimer>
#include <QWidget>
#include <deque>

#include "engine_bridge/engine_host.h"
#include "engine_bridge/request_story_types.h"
#include "panels/snapshot_view.h"

class QLabel;
class QListWidget;
class QListWidgetItem;
class QPushButton;

namespace kvscope::ui {

class RequestStoryPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  static constexpr size_t kMaxSnapshots = 48;
  explicit RequestStoryPanel(EngineHost* host, QWidget* parent = nullptr);

  void showRequest(SeqId id);  // asks the engine for the story; shown when it answers
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events) override;
  void resetForEngine(const ModelInfo& info) override;
  // The kept snapshot for `step`: the newest at or before it, else the oldest kept (null if none).
  SnapshotPtr snapshotAt(quint64 step) const;
  size_t keptSnapshots() const { return history_.size(); }

  const StoryText& story() const { return story_; }
  QListWidget* timeline() const { return list_; }
  QLabel* header() const { return header_; }
  QLabel* jumpNote() const { return jump_; }
  void jumpTo(QListWidgetItem* item);

 signals:
  void storyShown(qint64 id);
  void jumpRequested(const kvscope::SnapshotPtr& snap);

 private:
  void onStory(const StoryText& t);

  EngineHost* host_;
  QLabel *header_, *jump_;
  QListWidget* list_;
  QPushButton* refresh_;
  StoryText story_;
  SeqId wanted_ = -1;
  std::deque<SnapshotPtr> history_;
  QElapsedTimer sinceRefresh_;
};

}  // namespace kvscope::ui
