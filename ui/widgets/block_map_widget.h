#pragma once
// Every physical KV block of the engine's pool as one cell of a grid, painted by a single widget
// (no widget per block) straight from the newest Snapshot. Cells are batched by colour and only
// the rows inside the exposed rectangle are painted, so 16K+ blocks stay smooth.
//
// Cell legend: owner colour = used (the filled part solid, the empty tail pale); dark ring =
// shared (ref count > 1); grey hatched = cached-evictable (ref 0, still hashed); corner
// triangle = attention-sink block; red cross = released because it slid out of the window (the
// engine's DroppedOutOfWindow events, until the block is reused; it may still be cached); pale = free.
//
// With the hybrid KV cache (Gemma 3) the engine keeps two pools, one per KV group (global layers,
// sliding layers); the map shows one group at a time (setGroup), its blocks, tables and events.
#include <QWidget>
#include <unordered_map>
#include <vector>

#include "engine_bridge/ui_types.h"

namespace kvscope::ui {

class BlockMapWidget : public QWidget {
  Q_OBJECT
 public:
  explicit BlockMapWidget(QWidget* parent = nullptr);

  void setSnapshot(const SnapshotPtr& snap);
  void setVocab(const VocabPtr& vocab) { vocab_ = vocab; }
  void applyEvents(const std::vector<BlockEvent>& events);
  // A new engine: its blocks have no history, so the old engine's "slid out of the window"
  // marks and remembered block texts go.
  void clearHistory();
  void setHighlight(SeqId seq);  // -1: none
  SeqId highlight() const { return highlight_; }
  void setCellSize(int px);
  // KV group shown (0: global layers, or the only group; 1: sliding layers when hybrid).
  void setGroup(int group);
  int group() const { return group_; }
  int cellSize() const { return cell_; }

  // What the map currently shows, counted the way it is painted (tests compare it with the
  // engine's snapshot counters).
  struct Counts {
    int used = 0, cached = 0, free = 0, shared = 0, partial = 0, sinks = 0, dropped = 0;
  };
  Counts counts() const;
  int blockAt(const QPoint& p) const;  // -1 outside any cell
  QRect cellRect(int block) const;
  QString tooltipText(int block) const;
  int columns() const;
  const SnapshotPtr& snapshot() const { return snap_; }

  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int w) const override;
  QSize sizeHint() const override;

 signals:
  void blockClicked(int block, qint64 owner);

 protected:
  void paintEvent(QPaintEvent* e) override;
  bool event(QEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;

 private:
  int pitch() const { return cell_ + gap(); }
  int gap() const { return cell_ >= 10 ? 2 : 1; }
  int numBlocks() const { return snap_ ? static_cast<int>(blocks().size()) : 0; }
  int shownGroup() const { return snap_ && group_ < snap_->n_kv_groups() ? group_ : 0; }
  const std::vector<BlockSnap>& blocks() const { return snap_->group_blocks(shownGroup()); }
  const std::vector<BlockId>& tableOf(const SeqSnap& q) const;  // q's table in the shown group
  std::vector<uint8_t>& dropped() { return dropped_[static_cast<size_t>(shownGroup())]; }
  const std::vector<uint8_t>& dropped() const { return dropped_[static_cast<size_t>(shownGroup())]; }
  void rebuildHighlight();

  SnapshotPtr snap_;
  VocabPtr vocab_;
  SeqId highlight_ = -1;
  int group_ = 0;
  int cell_ = 18;
  std::vector<int> highlightIndex_;               // [num_blocks] logical index in the highlighted seq, -1
  std::vector<std::vector<uint8_t>> dropped_{1};  // [group][num_blocks] freed by the window, not reused since
  std::unordered_map<BlockHash, std::vector<TokenId>> hashTokens_;  // text of cached blocks whose owner is gone
};

}  // namespace kvscope::ui
