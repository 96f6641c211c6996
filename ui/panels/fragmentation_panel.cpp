#include "panels/fragmentation_panel.h"

#include <qcustomplot.h>

#include <QLabel>
#include <QPainter>
#include <QTimer>
#include <QVBoxLayout>

#include "widgets/seq_palette.h"
#include "widgets/thinned_series.h"
#include "widgets/theme.h"

namespace kvscope::ui {

ArenaBar::ArenaBar(QWidget* parent) : QWidget(parent) {
  setToolTip(
      tr("The whole pool in physical block order. Dark: full blocks; light: the empty part of partly "
         "filled blocks (the only waste paging has); grey: cached; pale: free."));
}

void ArenaBar::setSnapshot(const SnapshotPtr& s) {
  snap_ = s;
  update();
}

void ArenaBar::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const MapColors mc = map_colors(is_dark(palette().color(QPalette::Window)));
  const QColor base = palette().color(QPalette::Base);
  const QRect r = rect().adjusted(0, 4, -1, -4);
  p.fillRect(r, mc.free);
  if (!snap_) return;
  auto pale = [&](const QColor& c) {
    return QColor::fromRgbF(c.redF() * 0.35f + base.redF() * 0.65f, c.greenF() * 0.35f + base.greenF() * 0.65f,
                            c.blueF() * 0.35f + base.blueF() * 0.65f);
  };
  const int w = r.width();
  if (snap_->allocator.contiguous) {
    // The baseline arena in address order: each reservation in its request's colour, solid where
    // tokens are stored, pale where reserved but empty (internal waste); the free holes between
    // reservations are external fragmentation.
    const double total = std::max<int64_t>(1, snap_->allocator.total_slots);
    for (const ArenaSnap& a : snap_->allocator.ranges) {
      const int x0 = r.left() + static_cast<int>(a.start / total * w);
      const int x1 = r.left() + static_cast<int>((a.start + a.length) / total * w);
      if (a.owner < 0) continue;
      const QColor c = seq_color(a.owner);
      p.fillRect(QRect(x0, r.top(), std::max(1, x1 - x0), r.height()), pale(c));
      const int xf = r.left() + static_cast<int>((a.start + a.filled) / total * w);
      p.fillRect(QRect(x0, r.top(), std::max(0, xf - x0), r.height()), c);
      p.fillRect(QRect(x0, r.top(), 1, r.height()), palette().color(QPalette::WindowText));  // reservation start
    }
  } else if (!snap_->blocks.empty()) {
    // The paged pool in physical block order; one pixel column may cover many blocks.
    const double n = static_cast<double>(snap_->blocks.size());
    const double bs = snap_->block_size;
    const QColor used = seq_color(1), wasted = QColor(0xe1, 0x57, 0x59);
    for (int x = 0; x < w; ++x) {
      const size_t b0 = static_cast<size_t>(x * n / w), b1 = std::max(b0 + 1, static_cast<size_t>((x + 1) * n / w));
      double filled = 0, empty = 0, cached = 0;
      for (size_t b = b0; b < b1 && b < snap_->blocks.size(); ++b) {
        const BlockSnap& s = snap_->blocks[b];
        if (s.status == BlockStatus::Used) {
          filled += s.filled / bs;
          empty += 1 - s.filled / bs;
        } else if (s.status == BlockStatus::Cached) {
          cached += 1;
        }
      }
      const double cnt = static_cast<double>(b1 - b0);
      int y = r.bottom();
      auto seg = [&](double frac, const QColor& c) {
        const int h = static_cast<int>(frac / cnt * r.height() + 0.5);
        if (h > 0) p.fillRect(QRect(r.left() + x, y - h + 1, 1, h), c);
        y -= h;
      };
      seg(filled, used);
      seg(empty, wasted);
      seg(cached, mc.cached);
    }
  }
  p.setPen(palette().color(QPalette::Mid));
  p.drawRect(r);
}

FragmentationPanel::FragmentationPanel(QWidget* parent) : QWidget(parent) {
  numbers_ = new QLabel;
  numbers_->setWordWrap(true);
  numbers_->setTextFormat(Qt::RichText);
  arena_ = new ArenaBar;
  plot_ = new QCustomPlot;
  plot_->setMinimumHeight(120);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->axisRect()->setRangeZoom(Qt::Horizontal);
  plot_->xAxis->setLabel(tr("engine step"));
  plot_->yAxis->setLabel(tr("waste %"));
  plot_->yAxis->setRange(0, 100);
  waste_ = plot_->addGraph();
  waste_->setName(tr("waste %"));
  waste_->setPen(QPen(QColor(0xe1, 0x57, 0x59), 2));
  waste_->setBrush(QColor(0xe1, 0x57, 0x59, 40));
  extFrag_ = plot_->addGraph();
  extFrag_->setName(tr("external fragmentation %"));
  extFrag_->setPen(QPen(QColor(0x4e, 0x79, 0xa7), 2, Qt::DashLine));
  series_ = std::make_unique<ThinnedSeries>(std::vector<QCPGraph*>{waste_, extFrag_}, 1.0);  // keys: steps
  plot_->setNotAntialiasedElements(QCP::aePlottables | QCP::aeFills);  // replot cost, as in the memory panel
  plot_->legend->setVisible(true);
  plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  plot_->yAxis->setLabel(tr("%"));
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addWidget(numbers_);
  v->addWidget(arena_);
  v->addWidget(plot_, 1);
  replotTimer_ = new QTimer(this);
  replotTimer_->setSingleShot(true);
  replotTimer_->setInterval(150);
  connect(replotTimer_, &QTimer::timeout, this, [this] {
    if (!isVisible()) return;  // showEvent replots
    replotPending_ = false;
    plot_->replot();
  });
  textTimer_ = new QTimer(this);
  textTimer_->setSingleShot(true);
  textTimer_->setInterval(250);
  connect(textTimer_, &QTimer::timeout, this, [this] {
    if (isVisible()) showText(pending_);
  });
  applyTheme();
  restyle_on_palette_change(this, [this] { applyTheme(); });
  clear();
}

FragmentationPanel::~FragmentationPanel() = default;

void FragmentationPanel::requestReplot() {
  replotPending_ = true;
  if (!replotTimer_->isActive()) replotTimer_->start();
}

void FragmentationPanel::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (replotPending_) requestReplot();
  if (pending_ && !textTimer_->isActive()) textTimer_->start();
}

void FragmentationPanel::applyTheme() { style_plot(plot_, palette()); }

void FragmentationPanel::clear() {
  series_->clear();
  lastStep_ = ~0ull;
  peakWaste_ = 0;
  peakUsed_ = 0;
  numbers_->setText(tr("No run yet."));
  pending_.reset();
  arena_->setSnapshot(nullptr);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

QString FragmentationPanel::summaryText() const { return numbers_->text(); }

void FragmentationPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch&) {
  if (!snap) return;
  const MemorySnap& mem = snap->memory;
  peakUsed_ = std::max(peakUsed_, mem.blocks_used);
  if (mem.slots_reserved) peakWaste_ = std::max(peakWaste_, mem.waste_pct);
  if (snap->step != lastStep_ && mem.slots_reserved > 0) {
    series_->add(static_cast<double>(snap->step), {mem.waste_pct, 100.0 * snap->allocator.external_fragmentation});
    lastStep_ = snap->step;
    plot_->xAxis->setRange(0, std::max<double>(10, static_cast<double>(snap->step)));
    requestReplot();
  }
  // The text and the arena bar only matter on screen (a hidden tab catches up when shown), and a
  // word-wrapped label re-lays out the window on every change: refresh them 4 times a second.
  pending_ = snap;
  if (isVisible() && !textTimer_->isActive()) textTimer_->start();
}

void FragmentationPanel::showText(const SnapshotPtr& snap) {
  if (!snap) return;
  arena_->setSnapshot(snap);
  const MemorySnap& m = snap->memory;
  const AllocatorSnap& a = snap->allocator;
  const int64_t wastedSlots = m.slots_reserved - m.slots_filled;
  const double wastedKiB = static_cast<double>(wastedSlots) * static_cast<double>(m.kv_bytes_per_token) / 1024.0;
  if (a.contiguous) {
    int64_t reserve = 0;
    for (const ArenaSnap& r : a.ranges)
      if (r.owner >= 0) reserve = std::max(reserve, r.length);
    numbers_->setText(
        tr("<b>Contiguous baseline</b> (no paging, reserving %13 per request): %1 live reservations, the largest %2 slots, "
           "%3 slots reserved, %4 filled → <b>waste %5%</b> (%6 KiB reserved but empty). Free %7 slots, largest free run "
           "%8 → <b>external fragmentation %9%</b>. Reservations refused for lack of a long enough run: %10; "
           "requests that outgrew their reservation: %11. Peak waste %12%.")
            .arg(a.live_allocations)
            .arg(reserve)
            .arg(m.slots_reserved)
            .arg(m.slots_filled)
            .arg(m.waste_pct, 0, 'f', 1)
            .arg(wastedKiB, 0, 'f', 1)
            .arg(a.total_free)
            .arg(a.largest_free_run)
            .arg(100.0 * a.external_fragmentation, 0, 'f', 1)
            .arg(a.failed_reservations)
            .arg(a.overflows)
            .arg(peakWaste_, 0, 'f', 1)
            .arg(QString::fromStdString(a.reserve_policy)));
    return;
  }
  int liveSeqs = 0, partialLast = 0;
  for (const SeqSnap& q : snap->seqs)
    if (!q.block_table.empty()) {
      ++liveSeqs;
      if (q.tokens.size() % static_cast<size_t>(snap->block_size)) ++partialLast;
    }
  numbers_->setText(
      tr("<b>Paged pool</b>: %1 slots reserved in %2 used blocks, %3 filled → <b>waste %4%</b> (%5 empty slots = %6 KiB, "
         "all in the last block of %7 of %8 live sequences). Peak waste %9%, peak %10 blocks in use. "
         "<b>External fragmentation: none</b> — any of the %11 free blocks can serve any sequence. "
         "<i>Tick “contiguous baseline” in Settings (or use Compare) to measure the traditional allocator on the "
         "same workload.</i>")
          .arg(m.slots_reserved)
          .arg(m.blocks_used)
          .arg(m.slots_filled)
          .arg(m.waste_pct, 0, 'f', 1)
          .arg(wastedSlots)
          .arg(wastedKiB, 0, 'f', 1)
          .arg(partialLast)
          .arg(liveSeqs)
          .arg(peakWaste_, 0, 'f', 1)
          .arg(peakUsed_)
          .arg(m.blocks_free + m.blocks_cached));
}

}  // namespace kvscope::ui
