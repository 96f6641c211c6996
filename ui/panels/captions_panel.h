#pragma once
// Teaching captions: the engine's block-event stream turned into one plain-language sentence
// per event (allocated, shared, cached, hit, evicted, freed, preempted…). Single-stepping shows
// every event of the step; while running, busy batches are summarised so the list stays readable.
#include <QWidget>

#include "panels/snapshot_view.h"

class QLabel;
class QListWidget;

namespace kvscope::ui {

class CaptionsPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  explicit CaptionsPanel(QWidget* parent = nullptr);
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events) override;  // captions its events
  void resetForEngine(const ModelInfo&) override { clear(); }
  void clear();
  int captionCount() const;
  QString caption(int i) const;
  QListWidget* list() const { return list_; }

 private:
  void append(const QString& text, BlockEventKind kind, bool summary);

  QListWidget* list_;
  QLabel* header_;
  uint64_t lastStep_ = 0;
};

QString event_caption(const BlockEvent& e, const Snapshot* snap);

}  // namespace kvscope::ui
