#include "widgets/block_map_widget.h"

#include <QHelpEvent>
#include <QMouseEvent>
#include <QPaintEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>

#include "widgets/seq_palette.h"

namespace kvscope::ui {

namespace {

QColor blend(const QColor& a, const QColor& b, double t) {  // t = weight of b
  return QColor::fromRgbF(static_cast<float>(a.redF() * (1 - t) + b.redF() * t),
                          static_cast<float>(a.greenF() * (1 - t) + b.greenF() * t),
                          static_cast<float>(a.blueF() * (1 - t) + b.blueF() * t));
}

QString escaped_text(const QString& s) {
  QString t = s.toHtmlEscaped();
  t.replace(QLatin1Char('\n'), QStringLiteral("↵"));
  return t;
}

}  // namespace

BlockMapWidget::BlockMapWidget(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setAttribute(Qt::WA_OpaquePaintEvent);
  QSizePolicy sp(QSizePolicy::Expanding, QSizePolicy::Preferred);
  sp.setHeightForWidth(true);
  setSizePolicy(sp);
  setToolTip(QString());  // tooltips are built per cell in event()
}

void BlockMapWidget::clearHistory() {
  for (auto& d : dropped_) std::fill(d.begin(), d.end(), 0);
  hashTokens_.clear();
  update();
}

void BlockMapWidget::setSnapshot(const SnapshotPtr& snap) {
  const int oldN = numBlocks();
  snap_ = snap;
  const int n = numBlocks();
  if (n != oldN) {
    hashTokens_.clear();
    updateGeometry();
  }
  const int groups = snap_ ? snap_->n_kv_groups() : 1;
  dropped_.resize(static_cast<size_t>(groups));
  if (snap_) {
    for (int g = 0; g < groups; ++g) {
      const auto& bl = snap_->group_blocks(g);
      auto& d = dropped_[static_cast<size_t>(g)];
      if (d.size() != bl.size()) d.assign(bl.size(), 0);
      // A dropped marker lasts until the block is handed out again.
      for (size_t b = 0; b < bl.size(); ++b)
        if (bl[b].status == BlockStatus::Used) d[b] = 0;
    }
    // Remember the tokens of hashed blocks while an owner still lists them, so the tooltip of a
    // cached-evictable block (owner finished) can still show its text.
    if (hashTokens_.size() > 200000) hashTokens_.clear();
    const size_t bs = static_cast<size_t>(snap_->block_size);
    for (const SeqSnap& q : snap_->seqs) {
      const auto& table = tableOf(q);
      for (size_t li = 0; li < table.size(); ++li) {
        const BlockId b = table[li];
        if (b < 0 || b >= n) continue;
        const BlockSnap& s = blocks()[static_cast<size_t>(b)];
        if (!s.hashed || hashTokens_.count(s.hash)) continue;
        const size_t lo = li * bs, hi = std::min(q.tokens.size(), lo + bs);
        if (lo < hi)
          hashTokens_[s.hash] =
              std::vector<TokenId>(q.tokens.begin() + static_cast<long>(lo), q.tokens.begin() + static_cast<long>(hi));
      }
    }
  }
  rebuildHighlight();
  update();
}

const std::vector<BlockId>& BlockMapWidget::tableOf(const SeqSnap& q) const {
  static const std::vector<BlockId> none;
  const int g = shownGroup();
  if (g == 0) return q.block_table;
  return static_cast<size_t>(g - 1) < q.tables_after_first_group.size()
             ? q.tables_after_first_group[static_cast<size_t>(g - 1)]
             : none;
}

void BlockMapWidget::setGroup(int group) {
  if (group == group_) return;
  group_ = std::max(0, group);
  hashTokens_.clear();
  rebuildHighlight();
  updateGeometry();
  update();
}

void BlockMapWidget::applyEvents(const std::vector<BlockEvent>& events) {
  if (!snap_) return;
  for (const BlockEvent& e : events) {
    if (e.group < 0 || static_cast<size_t>(e.group) >= dropped_.size()) continue;
    auto& d = dropped_[static_cast<size_t>(e.group)];
    if (e.block < 0 || static_cast<size_t>(e.block) >= d.size()) continue;
    // The engine itself reports a block released while its sequence keeps running (the window
    // slid past it) as DroppedOutOfWindow.
    if (e.kind == BlockEventKind::DroppedOutOfWindow) d[static_cast<size_t>(e.block)] = 1;
  }
  update();
}

void BlockMapWidget::setHighlight(SeqId seq) {
  highlight_ = seq;
  rebuildHighlight();
  update();
}

void BlockMapWidget::rebuildHighlight() {
  highlightIndex_.assign(static_cast<size_t>(numBlocks()), -1);
  if (!snap_ || highlight_ < 0) return;
  for (const SeqSnap& q : snap_->seqs) {
    if (q.id != highlight_) continue;
    const auto& table = tableOf(q);
    for (size_t li = 0; li < table.size(); ++li) {
      const BlockId b = table[li];
      if (b >= 0 && static_cast<size_t>(b) < highlightIndex_.size())
        highlightIndex_[static_cast<size_t>(b)] = static_cast<int>(li);
    }
  }
}

void BlockMapWidget::setCellSize(int px) {
  cell_ = std::clamp(px, 3, 48);
  updateGeometry();
  update();
}

int BlockMapWidget::columns() const { return std::max(1, (width() - gap()) / pitch()); }

int BlockMapWidget::heightForWidth(int w) const {
  const int cols = std::max(1, (w - gap()) / pitch());
  const int rows = (numBlocks() + cols - 1) / cols;
  return std::max(rows * pitch() + gap(), 40);
}

QSize BlockMapWidget::sizeHint() const { return QSize(32 * pitch(), heightForWidth(32 * pitch())); }

QRect BlockMapWidget::cellRect(int block) const {
  const int cols = columns();
  return QRect(gap() + (block % cols) * pitch(), gap() + (block / cols) * pitch(), cell_, cell_);
}

int BlockMapWidget::blockAt(const QPoint& p) const {
  if (!snap_ || p.x() < gap() || p.y() < gap()) return -1;
  const int col = (p.x() - gap()) / pitch(), row = (p.y() - gap()) / pitch();
  if (col >= columns()) return -1;
  const int b = row * columns() + col;
  if (b >= numBlocks() || !cellRect(b).contains(p)) return -1;
  return b;
}

BlockMapWidget::Counts BlockMapWidget::counts() const {
  Counts c;
  if (!snap_) return c;
  for (size_t b = 0; b < blocks().size(); ++b) {
    const BlockSnap& s = blocks()[b];
    switch (s.status) {
      case BlockStatus::Used:
        ++c.used;
        if (s.ref_count > 1) ++c.shared;
        if (s.filled < snap_->block_size) ++c.partial;
        if (s.sink) ++c.sinks;
        break;
      case BlockStatus::Cached:
        ++c.cached;
        if (dropped()[b]) ++c.dropped;
        break;
      case BlockStatus::Free:
        ++c.free;
        if (dropped()[b]) ++c.dropped;
        break;
    }
  }
  return c;
}

void BlockMapWidget::paintEvent(QPaintEvent* e) {
  QPainter p(this);
  const QColor base = palette().color(QPalette::Base);
  p.fillRect(e->rect(), base);
  if (!snap_) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter, tr("No engine yet — the block map appears once a model is loaded."));
    return;
  }
  const MapColors mc = map_colors(is_dark(palette().color(QPalette::Window)));
  const int n = numBlocks(), cols = columns(), pt = pitch(), bsz = snap_->block_size;
  const int row0 = std::max(0, (e->rect().top() - gap()) / pt);
  const int row1 = (e->rect().bottom() - gap()) / pt;
  const int first = row0 * cols, last = std::min(n, (row1 + 1) * cols);
  const bool dimOthers = highlight_ >= 0;

  // Batch cells by colour: one drawRects per colour instead of one fillRect per cell.
  std::unordered_map<QRgb, QVector<QRect>> fills;
  QVector<QRect> hatched, holed, rings, hlRings;
  QVector<QLine> crosses;
  QVector<QPolygon> sinks;
  auto add = [&](const QColor& c, const QRect& r) { fills[c.rgb()].push_back(r); };
  for (int b = first; b < last; ++b) {
    const BlockSnap& s = blocks()[static_cast<size_t>(b)];
    const QRect r = cellRect(b);
    const bool inHl = dimOthers && highlightIndex_[static_cast<size_t>(b)] >= 0;
    const double dim = (dimOthers && !inHl) ? 0.6 : 0.0;  // fade everything but the chosen table
    switch (s.status) {
      case BlockStatus::Free:
        add(mc.free, r);
        if (dropped()[static_cast<size_t>(b)]) {
          crosses.push_back(QLine(r.topLeft() + QPoint(2, 2), r.bottomRight() - QPoint(2, 2)));
          crosses.push_back(QLine(r.topRight() + QPoint(-2, 2), r.bottomLeft() + QPoint(2, -2)));
        }
        break;
      case BlockStatus::Cached:
        add(blend(mc.cached, base, dim), r);
        hatched.push_back(r);
        if (dropped()[static_cast<size_t>(b)]) {
          crosses.push_back(QLine(r.topLeft() + QPoint(2, 2), r.bottomRight() - QPoint(2, 2)));
          crosses.push_back(QLine(r.topRight() + QPoint(-2, 2), r.bottomLeft() + QPoint(2, -2)));
        }
        break;
      case BlockStatus::Used: {
        const QColor c = blend(seq_color(s.owner), base, dim);
        const int live = std::max(0, s.filled - s.holes);  // token eviction: holes are not filled slots
        if (live >= bsz) {
          add(c, r);
        } else {
          add(blend(c, base, 0.65), r);  // the reserved-but-empty tail of the block
          const int w = r.width() * live / bsz;
          if (w > 0) add(c, QRect(r.left(), r.top(), w, r.height()));
          // Evicted slots: a hatched stretch after the live ones (their count, not their places).
          if (s.holes > 0)
            holed.push_back(QRect(r.left() + w, r.top(), std::max(1, r.width() * s.holes / bsz), r.height()));
        }
        if (s.ref_count > 1) rings.push_back(r);
        if (s.sink && cell_ >= 6) {
          const int t = std::max(4, cell_ / 2);
          sinks.push_back(QPolygon({r.topLeft(), r.topLeft() + QPoint(t, 0), r.topLeft() + QPoint(0, t)}));
        }
        break;
      }
    }
    if (inHl) hlRings.push_back(r);
  }
  p.setPen(Qt::NoPen);
  for (const auto& [rgb, rects] : fills) {
    p.setBrush(QColor::fromRgb(rgb));
    p.drawRects(rects.constData(), static_cast<int>(rects.size()));
  }
  if (!hatched.isEmpty()) {
    p.setBrush(QBrush(mc.cachedHatch, Qt::BDiagPattern));
    p.drawRects(hatched.constData(), static_cast<int>(hatched.size()));
  }
  if (!holed.isEmpty()) {
    p.setBrush(QBrush(mc.dropped, Qt::FDiagPattern));
    p.drawRects(holed.constData(), static_cast<int>(holed.size()));
  }
  p.setBrush(mc.sink);
  for (const QPolygon& poly : sinks) p.drawPolygon(poly);
  p.setBrush(Qt::NoBrush);
  if (!crosses.isEmpty()) {
    p.setPen(QPen(mc.dropped, cell_ >= 10 ? 1.6 : 1.0));
    p.drawLines(crosses);
  }
  if (!rings.isEmpty()) {
    // Inset so the ring stays inside the cell and never touches a neighbour.
    p.setPen(QPen(mc.sharedRing, cell_ >= 10 ? 2.0 : 1.0));
    for (QRect& r : rings) r.adjust(1, 1, -1, -1);
    p.drawRects(rings.constData(), static_cast<int>(rings.size()));
  }
  if (!hlRings.isEmpty()) {
    p.setPen(QPen(mc.highlightRing, 1.0));
    for (const QRect& r : hlRings) p.drawRect(r.adjusted(0, 0, -1, -1));
    // Logical block numbers show the table's order when the cells are big enough to read.
    if (cell_ >= 16) {
      QFont f = font();
      f.setPixelSize(std::max(8, cell_ / 2));
      f.setBold(true);
      p.setFont(f);
      for (const QRect& r : hlRings) {
        const int b = blockAt(r.center());
        if (b < 0) continue;
        const QColor c = seq_color(highlight_);
        p.setPen(c.lightness() > 150 ? QColor(0x10, 0x10, 0x10) : QColor(Qt::white));
        p.drawText(r, Qt::AlignCenter, QString::number(highlightIndex_[static_cast<size_t>(b)]));
      }
    }
  }
}

QString BlockMapWidget::tooltipText(int block) const {
  if (!snap_ || block < 0 || block >= numBlocks()) return QString();
  const BlockSnap& s = blocks()[static_cast<size_t>(block)];
  const size_t bs = static_cast<size_t>(snap_->block_size);
  QString status = QString::fromUtf8(block_status_name(s.status));
  if (s.status == BlockStatus::Used && s.ref_count > 1) status += tr(", shared");
  if (s.sink) status += tr(", attention sink");
  if (s.status != BlockStatus::Used && dropped()[static_cast<size_t>(block)]) status += tr(", slid out of the window");
  QString html = tr("<b>Block %1</b> — %2<br>ref count %3 · filled %4/%5")
                     .arg(block)
                     .arg(status)
                     .arg(s.ref_count)
                     .arg(s.filled)
                     .arg(bs);
  if (s.holes > 0) html += tr("<br>%1 evicted slots (holes, token eviction)").arg(s.holes);
  if (snap_->n_kv_groups() > 1)
    html += tr("<br>KV group: %1")
                .arg(QString::fromStdString(snap_->kv_groups[static_cast<size_t>(shownGroup())].name).toHtmlEscaped());

  QStringList owners;
  QString text;
  bool haveText = false;
  for (const SeqSnap& q : snap_->seqs) {
    const auto& table = tableOf(q);
    for (size_t li = 0; li < table.size(); ++li) {
      if (table[li] != block) continue;
      owners
          << tr("%1 (seq %2, logical block %3)").arg(QString::fromStdString(q.label).toHtmlEscaped()).arg(q.id).arg(li);
      if (!haveText && vocab_) {
        const size_t lo = li * bs, hi = std::min(q.tokens.size(), lo + static_cast<size_t>(std::max(0, s.filled)));
        if (lo < hi) text = vocab_->text(q.tokens.data() + lo, hi - lo);
        haveText = true;
      }
    }
  }
  if (!haveText && s.hashed && vocab_) {
    auto it = hashTokens_.find(s.hash);
    if (it != hashTokens_.end()) {
      text = vocab_->text(it->second.data(), it->second.size());
      haveText = true;
    }
  }
  html += tr("<br>owners: %1").arg(owners.isEmpty() ? tr("none") : owners.join(QStringLiteral("; ")));
  if (s.hashed) html += tr("<br>hash %1").arg(QStringLiteral("0x%1").arg(s.hash, 16, 16, QLatin1Char('0')));
  if (haveText)
    html += tr("<br>tokens: <i>“%1”</i>").arg(escaped_text(text));
  else if (s.status != BlockStatus::Free)
    html += tr("<br>tokens: (not in this snapshot)");
  return html;
}

bool BlockMapWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const int b = blockAt(he->pos());
    if (b >= 0)
      QToolTip::showText(he->globalPos(), tooltipText(b), this, cellRect(b));
    else
      QToolTip::hideText();
    return true;
  }
  return QWidget::event(e);
}

void BlockMapWidget::mousePressEvent(QMouseEvent* e) {
  const int b = blockAt(e->position().toPoint());
  if (b < 0 || !snap_) return QWidget::mousePressEvent(e);
  emit blockClicked(b, blocks()[static_cast<size_t>(b)].owner);
}

}  // namespace kvscope::ui
