#pragma once
// The drawn prefix tree: one node per block (depth left to right, leaves stacked), an edge to
// its parent block, colour by hits, height by ref count, live requests' paths highlighted,
// evictable leaves outlined, one stripe per instance when attached. Wheel zooms (around the
// cursor), drag pans, double-click fits, hover says the block's tokens, hash, refs and hits.
// Paints only what the viewport shows; when rows get thinner than a few pixels a column is
// drawn as merged strips (one per pixel run) instead of thousands of nodes.
#include <QWidget>
#include <memory>

#include "widgets/prefix_tree_layout.h"

namespace kvscope::ui {

class PrefixTreeWidget : public QWidget {
  Q_OBJECT
 public:
  explicit PrefixTreeWidget(QWidget* parent = nullptr);
  // A new node list: laid out now. The view fits the whole tree until the user zooms or pans.
  void setNodes(std::vector<PrefixTreeNode> nodes);
  // A tree laid out elsewhere (the attach session lays out 100K nodes off the UI thread).
  void setTree(std::shared_ptr<const PrefixTreeLayout> tree);
  void setInstanceNames(QStringList names) {
    instanceNames_ = std::move(names);
    update();
  }
  const PrefixTreeLayout& layout() const { return *tree_; }

  // View: pixels per row (18 at zoom 1) and the tree coordinates at the widget's top-left.
  double zoom() const { return zoom_; }
  void setZoom(double z, QPointF anchor);
  void fitToView();
  // Where node i is drawn (widget coordinates) and what hovering it says.
  QRectF nodeRect(int i) const;
  int nodeAt(QPointF p) const;  // -1: none
  QString hoverText(int i) const;
  bool drawsStrips() const;                          // level of detail: rows thinner than kStripBelowPx
  int lastPaintedItems() const { return painted_; }  // nodes or strips painted by the last paint

  QSize sizeHint() const override { return QSize(480, 320); }
  QSize minimumSizeHint() const override { return QSize(160, 100); }

 protected:
  void paintEvent(QPaintEvent*) override;
  void wheelEvent(QWheelEvent* e) override;
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseDoubleClickEvent(QMouseEvent* e) override;
  void resizeEvent(QResizeEvent* e) override;
  bool event(QEvent* e) override;  // tooltips

 private:
  double rowPx() const { return 18.0 * zoom_; }
  double colPx() const;  // column pitch: follows zoom up to 1, times colScale_
  QColor fillOf(const PrefixTreeNode& n) const;
  void paintColumnNodes(QPainter& p, int depth, std::pair<int, int> range);
  void paintColumnLabels(QPainter& p, int depth, std::pair<int, int> range);
  void paintColumnStrips(QPainter& p, int depth, std::pair<int, int> range);
  void paintEdges(QPainter& p, int depth, std::pair<int, int> range);
  void paintEmpty(QPainter& p);
  void paintInstanceLegend(QPainter& p);
  std::shared_ptr<const PrefixTreeLayout> tree_;  // never null
  QStringList instanceNames_;
  double zoom_ = 1.0;
  double colScale_ = 1.0;  // fitToView narrows columns to show a deep tree's width
  QPointF origin_;         // tree pixels at the widget's (0, 0)
  bool viewSet_ = false;   // the user zoomed or panned: keep the view; until then it fits the tree
  bool dragging_ = false;
  QPoint dragFrom_;
  int maxHits_ = 1, maxRefs_ = 1;
  int painted_ = 0;
};

}  // namespace kvscope::ui
