#pragma once
// The block map panel: the painted grid of physical blocks, its legend, a zoom slider, a
// one-line count of what is shown, and the list of sequences (click one to number its block
// table on the map in logical order).
#include <QListWidget>
#include <QWidget>

#include "panels/snapshot_view.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QScrollArea;
class QSlider;

namespace kvscope::ui {

class BlockMapWidget;
class LiveLabel;
class StateStripWidget;

class BlockMapPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  explicit BlockMapPanel(QWidget* parent = nullptr);
  BlockMapWidget* map() const { return map_; }
  QListWidget* sequenceList() const { return list_; }
  QComboBox* groupSelector() const { return group_; }      // shown only with the hybrid KV cache
  StateStripWidget* stateStrip() const { return state_; }  // shown only for recurrent models
  void setVocab(const VocabPtr& v);
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events) override;
  void resetForEngine(const ModelInfo& info) override;
  void setCompact(bool compact);  // compare view: no sequence list
  void fit();                     // cell size so the whole pool fits in view, if "Fit" is on

 protected:
  bool eventFilter(QObject* o, QEvent* e) override;

 private:
  void refreshList(const Snapshot& s);
  void refreshGroups(const Snapshot& s);
  int shownBlocks() const;

  BlockMapWidget* map_;
  QScrollArea* scroll_;
  QListWidget* list_;
  LiveLabel* summary_;
  QSlider* zoom_;
  QCheckBox* fit_;
  QComboBox* group_;
  StateStripWidget* state_;
  QWidget* groupRow_;
  std::vector<SeqId> listIds_;
  struct RowKey {  // what a row's text is made of; the default never matches a real row
    SeqState state = SeqState::Waiting;
    int live = -1, dropped = -1, group = -1;
    bool operator==(const RowKey&) const = default;
  };
  std::vector<RowKey> rowKeys_;  // per row of list_, as last formatted
};

// Swatches explaining the block map's colours and marks, painted with the map's own colours.
class BlockLegend : public QWidget {
  Q_OBJECT
 public:
  explicit BlockLegend(QWidget* parent = nullptr);
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override { return QSize(100, height()); }
  int heightForWidth(int w) const override;

 protected:
  void paintEvent(QPaintEvent*) override;
  void resizeEvent(QResizeEvent*) override;

 private:
  int layoutItems(int width, bool paint);
};

}  // namespace kvscope::ui
