#include "widgets/prefix_tree_widget.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <climits>
#include <cmath>

#include "widgets/seq_palette.h"

namespace kvscope::ui {

namespace {

constexpr double kBaseRowPx = 18.0;
constexpr double kBaseColPx = 110.0;
constexpr double kStripBelowPx = 3.0;  // rows thinner than this: merged strips
constexpr double kTextFromPx = 13.0;   // rows at least this tall: the tokens inside the node
constexpr double kMargin = 12.0;
constexpr double kMaxFitZoom = 1.6;  // a small tree: rows a little taller than at zoom 1
constexpr int kLabelChars = 40;      // more never fits a node
const QColor kLive(0xf2, 0x8e, 0x2b), kEvictable(0x9a, 0x9a, 0x9a), kPartial(0xd0, 0xd8, 0xe8),
    kCheckpoint(0x6a, 0x3d, 0x9a);

// Instance i's stripe colour (attach): far from the nodes' blues and the live orange.
QColor instanceColor(int i) {
  static const QColor k[] = {QColor(0xe1, 0x57, 0x59), QColor(0x59, 0xa1, 0x4f), QColor(0xb0, 0x7a, 0xa1),
                             QColor(0xed, 0xc9, 0x48), QColor(0x76, 0xb7, 0xb2), QColor(0x9c, 0x75, 0x5f),
                             QColor(0xff, 0x9d, 0xa7), QColor(0x3b, 0x3b, 0x3b)};
  return k[i % 8];
}

double hitShade(int hits, int maxHits) { return maxHits > 0 ? std::log1p(hits) / std::log1p(maxHits) : 0.0; }

}  // namespace

PrefixTreeWidget::PrefixTreeWidget(QWidget* parent) : QWidget(parent), tree_(std::make_shared<PrefixTreeLayout>()) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  setFocusPolicy(Qt::WheelFocus);
}

void PrefixTreeWidget::setNodes(std::vector<PrefixTreeNode> nodes) {
  auto t = std::make_shared<PrefixTreeLayout>();
  t->build(std::move(nodes));
  setTree(std::move(t));
}

void PrefixTreeWidget::setTree(std::shared_ptr<const PrefixTreeLayout> tree) {
  if (!tree) tree = std::make_shared<PrefixTreeLayout>();
  tree_ = std::move(tree);
  maxHits_ = maxRefs_ = 1;
  for (const PrefixTreeNode& n : tree_->nodes())
    maxHits_ = std::max(maxHits_, n.hits), maxRefs_ = std::max(maxRefs_, n.refCount);
  if (!viewSet_ && tree_->size() > 0) fitToView();
  update();
}

double PrefixTreeWidget::colPx() const { return std::max(8.0, kBaseColPx * colScale_ * std::min(1.0, zoom_)); }

void PrefixTreeWidget::setZoom(double z, QPointF anchor) {
  z = std::clamp(z, 1e-4, 4.0);
  // Keep the tree point under the anchor where it is.
  const double oldRow = (anchor.y() + origin_.y()) / rowPx(), oldCol = (anchor.x() + origin_.x()) / colPx();
  zoom_ = z;
  origin_ = QPointF(oldCol * colPx() - anchor.x(), oldRow * rowPx() - anchor.y());
  viewSet_ = true;
  update();
}

void PrefixTreeWidget::fitToView() {
  // Rows fit the height (a small tree a little larger than zoom 1); columns narrow to fit the
  // width, down to 0.4 (labels still fit), so a long shared prefix and where it branches show at once.
  const double rows = std::max(1, tree_->rows()), cols = std::max(1, tree_->columns());
  zoom_ = std::clamp((height() - 2 * kMargin) / (rows * kBaseRowPx), 1e-4, kMaxFitZoom);
  colScale_ = std::clamp((width() - 2 * kMargin) / (cols * kBaseColPx * std::min(1.0, zoom_)), 0.4, 1.0);
  origin_ = QPointF(-kMargin, -kMargin - rowPx() / 2);
  update();
}

bool PrefixTreeWidget::drawsStrips() const { return rowPx() < kStripBelowPx; }

QRectF PrefixTreeWidget::nodeRect(int i) const {
  const PrefixTreeNode& n = tree_->nodes()[static_cast<size_t>(i)];
  const double refScale = maxRefs_ > 1 ? std::log2(1 + n.refCount) / std::log2(1 + maxRefs_) : 1.0;
  const double h = std::max(1.0, rowPx() * (0.45 + 0.4 * refScale));
  const double w = colPx() * 0.74;
  const double x = tree_->depthOf(i) * colPx() - origin_.x();
  const double y = tree_->rowOf(i) * rowPx() - origin_.y();
  return QRectF(x, y - h / 2, w, h);
}

int PrefixTreeWidget::nodeAt(QPointF p) const {
  if (tree_->size() == 0) return -1;
  const int depth = static_cast<int>(std::floor((p.x() + origin_.x()) / colPx()));
  const int i = tree_->nearestInColumn(depth, (p.y() + origin_.y()) / rowPx());
  if (i < 0) return -1;
  const QRectF r = nodeRect(i).adjusted(0, -2, 0, 2);  // thin rows stay hoverable
  return r.contains(p) ? i : -1;
}

QString PrefixTreeWidget::hoverText(int i) const {
  if (i < 0 || i >= tree_->size()) return {};
  const PrefixTreeNode& n = tree_->nodes()[static_cast<size_t>(i)];
  const QString tokens = tree_->tokensOf(i), hash = tree_->hashOf(i);
  QStringList lines;
  lines << (tokens.isEmpty() ? tr("(tokens not known: no tokenizer, or cached before this view saw it)")
                             : QStringLiteral("\u201c%1\u201d").arg(tokens));
  lines << (hash.isEmpty() ? tr("not full yet: not in the prefix cache") : tr("hash %1").arg(hash));
  lines << tr("ref count %1 · hits %2 · depth %3 (block %4 of its prefix)")
               .arg(n.refCount)
               .arg(n.hits)
               .arg(tree_->depthOf(i))
               .arg(tree_->depthOf(i) + 1);
  if (n.live) lines << tr("on a live request's path");
  if (n.checkpoint)
    lines << tr("◆ state checkpoint: the recurrent state after this block is saved, so a prefix hit can end here");
  if (n.evictable)
    lines << (tree_->isLeaf(i) ? tr("evictable leaf: ref 0, the LRU recycles it when the pool needs a block")
                               : tr("evictable: ref 0; recycling it also drops its cached descendants"));
  if (n.instances) {
    QStringList held;
    for (int k = 0; k < 32; ++k)
      if (n.instances & (1u << k)) held << (k < instanceNames_.size() ? instanceNames_[k] : tr("instance %1").arg(k));
    lines << tr("cached on %n instance(s): %1", nullptr, static_cast<int>(held.size()))
                 .arg(held.join(QStringLiteral(", ")));
  }
  return lines.join(QLatin1Char('\n'));
}

QColor PrefixTreeWidget::fillOf(const PrefixTreeNode& n) const {
  if (n.partial) return kPartial;
  // Hits: pale blue (never hit) to deep blue (the most hit block on screen).
  const double t = hitShade(n.hits, maxHits_);
  QColor c = QColor::fromRgbF(static_cast<float>(0.62 - 0.45 * t), static_cast<float>(0.74 - 0.38 * t),
                              static_cast<float>(0.92 - 0.22 * t));
  if (n.evictable)
    c = QColor::fromRgbF(static_cast<float>((c.redF() + kEvictable.redF()) / 2),
                         static_cast<float>((c.greenF() + kEvictable.greenF()) / 2),
                         static_cast<float>((c.blueF() + kEvictable.blueF()) / 2));
  return c;
}

void PrefixTreeWidget::paintEmpty(QPainter& p) {
  p.setPen(palette().color(QPalette::PlaceholderText));
  p.drawText(rect(), Qt::AlignCenter,
             tr("No cached blocks yet: run a scenario or chat, and the prefix tree grows here."));
}

void PrefixTreeWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  painted_ = 0;
  if (tree_->size() == 0) return paintEmpty(p);
  const double rowLo = (origin_.y() - rowPx()) / rowPx(), rowHi = (origin_.y() + height() + rowPx()) / rowPx();
  const int firstCol = std::max(0, static_cast<int>(std::floor(origin_.x() / colPx())));
  const int lastCol = std::min(tree_->columns() - 1, static_cast<int>(std::ceil((origin_.x() + width()) / colPx())));
  const bool strips = drawsStrips();
  if (!strips) {
    p.setRenderHint(QPainter::Antialiasing, rowPx() >= 6);
    for (int d = std::max(1, firstCol); d <= lastCol + 1 && d < tree_->columns(); ++d)
      paintEdges(p, d, tree_->rangeInColumn(d, rowLo, rowHi));
  }
  for (int d = firstCol; d <= lastCol; ++d) {
    const auto range = tree_->rangeInColumn(d, rowLo, rowHi);
    if (strips)
      paintColumnStrips(p, d, range);
    else
      paintColumnNodes(p, d, range);
  }
  paintInstanceLegend(p);
}

// Attach: which stripe colour is which instance, bottom left.
void PrefixTreeWidget::paintInstanceLegend(QPainter& p) {
  if (instanceNames_.isEmpty()) return;
  p.setRenderHint(QPainter::Antialiasing, false);
  const int lh = fontMetrics().height() + 2;
  int y = height() - 6 - lh * static_cast<int>(std::min<qsizetype>(instanceNames_.size(), 8));
  for (int i = 0; i < instanceNames_.size() && i < 8; ++i, y += lh) {
    p.fillRect(QRect(8, y + 3, 10, lh - 6), instanceColor(i));
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRect(22, y, width() - 30, lh), Qt::AlignVCenter | Qt::AlignLeft,
               tr("stripe: cached on %1").arg(instanceNames_[i]));
  }
}

// One line per visible child to its parent; the live paths' edges thick and orange.
void PrefixTreeWidget::paintEdges(QPainter& p, int depth, std::pair<int, int> range) {
  std::vector<QLineF> plain, live;
  const std::vector<int>& col = tree_->column(depth);
  for (int k = range.first; k < range.second; ++k) {
    const int c = col[static_cast<size_t>(k)];
    const int par = tree_->nodes()[static_cast<size_t>(c)].parent;
    if (par < 0) continue;
    const QRectF a = nodeRect(par), b = nodeRect(c);
    const QLineF l(a.right(), a.center().y(), b.left(), b.center().y());
    (tree_->nodes()[static_cast<size_t>(c)].live && tree_->nodes()[static_cast<size_t>(par)].live ? live : plain)
        .push_back(l);
  }
  p.setPen(QPen(palette().color(QPalette::Mid), 1));
  p.drawLines(plain.data(), static_cast<int>(plain.size()));
  p.setPen(QPen(kLive, std::max(1.5, rowPx() / 6)));
  p.drawLines(live.data(), static_cast<int>(live.size()));
}

void PrefixTreeWidget::paintColumnNodes(QPainter& p, int depth, std::pair<int, int> range) {
  const std::vector<int>& col = tree_->column(depth);
  const double stripeW = std::clamp(colPx() / 14, 2.0, 8.0);
  for (int k = range.first; k < range.second; ++k) {
    const int i = col[static_cast<size_t>(k)];
    const PrefixTreeNode& n = tree_->nodes()[static_cast<size_t>(i)];
    const QRectF r = nodeRect(i);
    QPen pen(n.live ? kLive : (n.evictable ? kEvictable.darker(140) : palette().color(QPalette::Mid)),
             n.live ? 2.0 : 1.0);
    if (n.evictable && tree_->isLeaf(i)) pen.setStyle(Qt::DashLine);  // evictable leaf: goes first
    p.setPen(rowPx() >= 5 ? pen : Qt::NoPen);
    p.setBrush(fillOf(n));
    p.drawRect(r);
    if (n.checkpoint && rowPx() >= 5) {  // a diamond on the block's right edge: the state saved there
      const double h = std::min(r.height() - 2, 10.0) / 2;
      const QPointF m(r.right() - h - 2, r.center().y());
      p.setBrush(kCheckpoint);
      p.setPen(Qt::NoPen);
      p.drawPolygon(QPolygonF({m + QPointF(0, -h), m + QPointF(h, 0), m + QPointF(0, h), m + QPointF(-h, 0)}));
    }
    for (int b = 0, s = 0; n.instances && b < 32; ++b)  // attach: who holds it
      if (n.instances & (1u << b))
        p.fillRect(QRectF(r.left() + 1 + s++ * stripeW, r.top() + 1, stripeW, r.height() - 2), instanceColor(b));
    ++painted_;
  }
  if (rowPx() >= kTextFromPx && colPx() >= 40) paintColumnLabels(p, depth, range);
}

// The tokens inside the nodes, cut at the node's right edge by one clip for the whole column
// (a clipped drawText per node cost ~30 us each).
void PrefixTreeWidget::paintColumnLabels(QPainter& p, int depth, std::pair<int, int> range) {
  const std::vector<int>& col = tree_->column(depth);
  const double x = depth * colPx() - origin_.x(), w = colPx() * 0.74;
  p.save();
  p.setRenderHint(QPainter::Antialiasing, false);
  p.setClipRect(QRectF(x, 0, w - 3, height()));
  p.setPen(QColor(0x1b, 0x1f, 0x27));
  const QFontMetricsF fm(font());
  const double stripes = std::clamp(colPx() / 14, 2.0, 8.0) * 2;
  // Shape only what can show: the clip cuts the rest anyway, and glyphs are the cost here.
  const int fits = std::min(kLabelChars, 2 + static_cast<int>(w / std::max(1.0, fm.averageCharWidth())));
  for (int k = range.first; k < range.second; ++k) {
    const int i = col[static_cast<size_t>(k)];
    const PrefixTreeNode& n = tree_->nodes()[static_cast<size_t>(i)];
    const QString tokens = tree_->tokensOf(i);
    const QString t = tokens.isEmpty() ? tree_->hashOf(i).left(std::min(8, fits)) : tokens.left(fits);
    const double y = tree_->rowOf(i) * rowPx() - origin_.y() + (fm.ascent() - fm.descent()) / 2;
    p.drawText(QPointF(x + 4 + (n.instances ? stripes : 0), y), t);
  }
  p.restore();
}

// Far zoom: each pixel row of a column shows the most telling of its nodes (live, then shared,
// then other, then evictable), and equal neighbouring rows merge into one rectangle, so 16K
// blocks cost at most a few fillRects per pixel row on screen.
void PrefixTreeWidget::paintColumnStrips(QPainter& p, int depth, std::pair<int, int> range) {
  const std::vector<int>& col = tree_->column(depth);
  const double x = depth * colPx() - origin_.x(), w = colPx() * 0.74;
  auto rankOf = [](const PrefixTreeNode& n) { return n.live ? 3 : n.refCount >= 2 ? 2 : n.evictable ? 0 : 1; };
  const QColor byRank[4] = {kEvictable, QColor(0x8c, 0xae, 0xdc), QColor(0x2f, 0x5f, 0xa8), kLive};
  int runRank = -1, runTop = 0, runEnd = 0;  // pixel rows [runTop, runEnd)
  int pixel = INT_MIN, pixelRank = -1;
  auto flush = [&] {
    if (runRank >= 0) p.fillRect(QRectF(x, runTop, w, runEnd - runTop), byRank[runRank]), ++painted_;
  };
  auto closePixel = [&] {
    if (pixelRank < 0) return;
    if (pixelRank == runRank && pixel <= runEnd) {
      runEnd = pixel + 1;
    } else {
      flush();
      runRank = pixelRank, runTop = pixel, runEnd = pixel + 1;
    }
  };
  for (int k = range.first; k < range.second; ++k) {
    const int i = col[static_cast<size_t>(k)];
    const int y = static_cast<int>(std::floor(tree_->rowOf(i) * rowPx() - origin_.y()));
    if (y != pixel) {
      closePixel();
      pixel = y, pixelRank = -1;
    }
    pixelRank = std::max(pixelRank, rankOf(tree_->nodes()[static_cast<size_t>(i)]));
  }
  closePixel();
  flush();
}

void PrefixTreeWidget::wheelEvent(QWheelEvent* e) {
  const double steps = e->angleDelta().y() / 120.0;
  setZoom(zoom_ * std::pow(1.25, steps), e->position());
  e->accept();
}

void PrefixTreeWidget::mousePressEvent(QMouseEvent* e) {
  if (e->button() != Qt::LeftButton) return QWidget::mousePressEvent(e);
  dragging_ = true;
  dragFrom_ = e->position().toPoint();
  setCursor(Qt::ClosedHandCursor);
}

void PrefixTreeWidget::mouseMoveEvent(QMouseEvent* e) {
  if (!dragging_) return QWidget::mouseMoveEvent(e);
  const QPoint now = e->position().toPoint();
  origin_ -= QPointF(now - dragFrom_);
  dragFrom_ = now;
  viewSet_ = true;
  update();
}

void PrefixTreeWidget::mouseReleaseEvent(QMouseEvent* e) {
  dragging_ = false;
  unsetCursor();
  QWidget::mouseReleaseEvent(e);
}

void PrefixTreeWidget::mouseDoubleClickEvent(QMouseEvent*) {
  viewSet_ = false;  // follows the tree again as it grows
  fitToView();
}

void PrefixTreeWidget::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  if (!viewSet_) fitToView();
}

bool PrefixTreeWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* h = static_cast<QHelpEvent*>(e);
    const int i = nodeAt(h->pos());
    if (i >= 0)
      QToolTip::showText(h->globalPos(), hoverText(i), this);
    else
      QToolTip::showText(h->globalPos(), tr("Wheel: zoom · drag: pan · double-click: fit"), this);
    return true;
  }
  return QWidget::event(e);
}

}  // namespace kvscope::ui
