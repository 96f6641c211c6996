#pragma once
// A hybrid recurrent model's state pool beside the block map: one cell per state slot (the
// fixed conv + recurrent state of one running sequence, in that sequence's colour, its bytes in
// the tooltip) and one per checkpoint held (a saved state at a block boundary, what a prefix
// hit restores; a budget holds thousands, so at most two rows of them are drawn), each section
// under a line of counts and bytes. Hidden for models without recurrent layers.
#include <QWidget>
#include <vector>

#include "engine_bridge/ui_types.h"

namespace kvscope::ui {

class LiveLabel;

class StateStripWidget : public QWidget {
  Q_OBJECT
 public:
  explicit StateStripWidget(QWidget* parent = nullptr);
  void setSnapshot(const Snapshot& s);  // hides itself unless s.state.on
  void clear();

  // What is painted, for tests: each sequence slot's owner (-1: free), the checkpoints held.
  const std::vector<SeqId>& slotOwners() const { return owners_; }
  int checkpointsHeld() const { return checkpointsHeld_; }
  int checkpointSlots() const { return checkpointSlots_; }
  QString caption() const;  // both lines below, one under the other

 protected:
  bool eventFilter(QObject* o, QEvent* e) override;  // the cells: paint, tooltips, wrap

 private:
  QString slotsLine() const;
  QString checkpointsLine() const;
  QString slotTip(int k) const;
  QString checkpointTip(int k) const;
  int perRow() const;
  QRect cellRect(int k) const;  // the k-th cell of either section, in its own widget
  int checkpointCells() const;  // drawn: the checkpoints held, at most two rows
  void relayout();

  LiveLabel *slotsLine_, *checkpointsLine_;
  QWidget *slotCells_, *checkpointCells_;
  std::vector<SeqId> owners_;
  std::vector<QString> ownerLabels_;
  std::vector<int32_t> ownerTokens_;
  std::vector<int32_t> checkpointTokens_;  // held, longest first
  int checkpointsHeld_ = 0, checkpointSlots_ = 0, pending_ = 0;
  qint64 bytesPerSlot_ = 0;
  QString dtype_, policy_;
};

}  // namespace kvscope::ui
