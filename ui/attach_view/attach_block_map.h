#pragma once
// The block map of an attached deployment: one cell per cached block, one band per instance
// and tier (group_idx, medium), coloured by the prefix (root hash) it belongs to, shaded by
// depth; hover for hash, tokens, depth and age. Paints only what is visible, so 100,000 blocks
// cost what the visible cells cost.
#include <QWidget>
#include <memory>

#include "attach_view/attach_session.h"

namespace kvscope::ui {

class AttachBlockMap : public QWidget {
  Q_OBJECT
 public:
  explicit AttachBlockMap(QWidget* parent = nullptr);
  void setPicture(std::shared_ptr<const AttachPicture> p);
  QSize sizeHint() const override;
  int bands() const { return static_cast<int>(bands_.size()); }
  QString bandTitle(int i) const { return bands_.at(static_cast<size_t>(i)).title; }  // "... · N blocks"

 protected:
  void paintEvent(QPaintEvent*) override;
  bool event(QEvent* e) override;  // tooltips
  void resizeEvent(QResizeEvent*) override;

 private:
  struct Band {
    int instance = 0;
    QString title;
    const AttachCell* cells = nullptr;  // a run of the instance's cells (they come sorted by tier)
    size_t count = 0;
    int top = 0, rows = 0;  // layout in pixels / cell rows
  };
  void layoutBands();
  const AttachCell* cellAt(QPoint p, const Band** band) const;
  std::shared_ptr<const AttachPicture> pic_;
  std::vector<Band> bands_;
  int cols_ = 1;
  static constexpr int kCell = 9, kGap = 1, kTitle = 18;
};

}  // namespace kvscope::ui
