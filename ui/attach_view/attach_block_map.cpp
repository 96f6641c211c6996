#include "attach_view/attach_block_map.h"

#include <QDateTime>
#include <QHelpEvent>
#include <QPainter>
#include <QPaintEvent>
#include <QToolTip>

namespace kvscope::ui {
namespace {

QColor prefix_colour(uint64_t root, int depth) {
  // A stable hue per prefix tree; deeper blocks a little lighter, so chains read as gradients.
  const int hue = static_cast<int>((root * 0x9e3779b97f4a7c15ull) >> 55) % 360;
  const int light = std::min(200, 110 + 6 * std::min(depth, 15));
  return QColor::fromHsl(hue, 150, light);
}

}  // namespace

AttachBlockMap::AttachBlockMap(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumHeight(80);
}

void AttachBlockMap::setPicture(std::shared_ptr<const AttachPicture> p) {
  pic_ = std::move(p);
  layoutBands();
  updateGeometry();
  update();
}

void AttachBlockMap::layoutBands() {
  bands_.clear();
  if (!pic_) return;
  cols_ = std::max(1, (width() - 8) / (kCell + kGap));
  int top = 0;
  for (size_t i = 0; i < pic_->instances.size(); ++i) {
    const AttachInstancePicture& inst = pic_->instances[i];
    // Cells come sorted by (group, medium): each run is one band, found in one linear pass.
    size_t from = 0;
    do {
      size_t to = from;
      while (to < inst.cells.size() && inst.cells[to].group_idx == inst.cells[from].group_idx &&
             inst.cells[to].medium == inst.cells[from].medium)
        ++to;
      Band b;
      b.instance = static_cast<int>(i);
      b.cells = inst.cells.empty() ? nullptr : &inst.cells[from];
      b.count = to - from;
      const int group = inst.cells.empty() ? 0 : inst.cells[from].group_idx;
      const QString medium = inst.cells.empty() ? QStringLiteral("GPU") : inst.cells[from].medium;
      b.title = QStringLiteral("%1 (rank %2) · group %3 · %4 · %5 blocks%6")
                    .arg(inst.endpoint)
                    .arg(inst.dp_rank)
                    .arg(group)
                    .arg(medium.isEmpty() ? QStringLiteral("medium unspecified") : medium)
                    .arg(b.count)
                    .arg(inst.stale ? QStringLiteral(" · STALE") : QString());
      b.top = top;
      b.rows =
          std::max<int>(1, static_cast<int>((b.count + static_cast<size_t>(cols_) - 1) / static_cast<size_t>(cols_)));
      top += kTitle + b.rows * (kCell + kGap) + 8;
      bands_.push_back(std::move(b));
      from = to;
    } while (from < inst.cells.size());
  }
  setMinimumHeight(std::max(80, top));
}

QSize AttachBlockMap::sizeHint() const { return {640, std::max(120, minimumHeight())}; }

void AttachBlockMap::resizeEvent(QResizeEvent*) { layoutBands(); }

void AttachBlockMap::paintEvent(QPaintEvent* e) {
  QPainter p(this);
  p.fillRect(e->rect(), palette().base());
  if (bands_.empty()) {
    p.drawText(rect(), Qt::AlignCenter, tr("Waiting for the first KV events…"));
    return;
  }
  const QRect clip = e->rect();
  for (const Band& b : bands_) {
    const int cellsTop = b.top + kTitle;
    if (b.top > clip.bottom() || cellsTop + b.rows * (kCell + kGap) < clip.top()) continue;
    p.setPen(palette().text().color());
    p.drawText(QRect(4, b.top, width() - 8, kTitle), Qt::AlignLeft | Qt::AlignVCenter, b.title);
    const int firstRow = std::max(0, (clip.top() - cellsTop) / (kCell + kGap));
    const int lastRow = std::min(b.rows - 1, (clip.bottom() - cellsTop) / (kCell + kGap));
    for (int r = firstRow; r <= lastRow; ++r)
      for (int c = 0; c < cols_; ++c) {
        const size_t i = static_cast<size_t>(r) * static_cast<size_t>(cols_) + static_cast<size_t>(c);
        if (i >= b.count) break;
        const AttachCell* cell = &b.cells[i];
        p.fillRect(4 + c * (kCell + kGap), cellsTop + r * (kCell + kGap), kCell, kCell,
                   prefix_colour(cell->root_key, cell->depth));
      }
  }
}

const AttachCell* AttachBlockMap::cellAt(QPoint pt, const Band** band) const {
  for (const Band& b : bands_) {
    const int y = pt.y() - b.top - kTitle;
    if (y < 0 || y >= b.rows * (kCell + kGap)) continue;
    const int c = (pt.x() - 4) / (kCell + kGap), r = y / (kCell + kGap);
    if (pt.x() < 4 || c >= cols_) return nullptr;
    const size_t i = static_cast<size_t>(r) * static_cast<size_t>(cols_) + static_cast<size_t>(c);
    *band = &b;
    return i < b.count ? &b.cells[i] : nullptr;
  }
  return nullptr;
}

bool AttachBlockMap::event(QEvent* e) {
  if (e->type() != QEvent::ToolTip) return QWidget::event(e);
  auto* he = static_cast<QHelpEvent*>(e);
  const Band* band = nullptr;
  const AttachCell* c = cellAt(he->pos(), &band);
  if (!c || !pic_) {
    QToolTip::hideText();
    return true;
  }
  const double age = pic_->taken_at - c->first_seen;
  QToolTip::showText(
      he->globalPos(),
      tr("hash %1\ndepth %2 in its prefix · %3 tokens · %4 cop%5\ntokens: %6\nfirst seen %7 s ago, last stored %8 s ago")
          .arg(c->hash)
          .arg(c->depth)
          .arg(c->tokens)
          .arg(c->copies)
          .arg(c->copies == 1 ? "y" : "ies")
          .arg(c->token_preview)
          .arg(age, 0, 'f', 1)
          .arg(pic_->taken_at - c->last_seen, 0, 'f', 1),
      this);
  return true;
}

}  // namespace kvscope::ui
