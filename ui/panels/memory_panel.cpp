#include "panels/memory_panel.h"

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>

#include <QCheckBox>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QTextStream>
#include <QTimer>
#include <QVBoxLayout>

#include "widgets/live_label.h"
#include "widgets/thinned_series.h"
#include "widgets/seq_palette.h"
#include "widgets/theme.h"

namespace kvscope::ui {

MemoryPanel::MemoryPanel(QWidget* parent) : QWidget(parent) {
  plot_ = new QCustomPlot;
  plot_->setMinimumHeight(160);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->axisRect()->setRangeDrag(Qt::Horizontal | Qt::Vertical);
  plot_->axisRect()->setRangeZoom(Qt::Horizontal);
  plot_->xAxis->setLabel(tr("engine time (s)"));
  plot_->yAxis->setLabel(tr("KV blocks"));
  plot_->yAxis2->setVisible(true);
  plot_->yAxis2->setLabel(tr("tokens / s"));
  plot_->legend->setVisible(true);
  plot_->legend->setFillOrder(QCPLegend::foColumnsFirst);
  plot_->legend->setWrap(5);
  plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);

  auto makeGraph = [this](const QString& name, const QColor& c, QCPAxis* y, bool filled) {
    QCPGraph* g = plot_->addGraph(plot_->xAxis, y);
    g->setName(name);
    g->setPen(QPen(c, 2));
    if (filled) g->setBrush(QColor(c.red(), c.green(), c.blue(), 40));
    g->setAdaptiveSampling(true);
    return g;
  };
  // Stacked areas: used at the bottom, cached on top of it, free up to the pool size, so the
  // three always add up to the whole pool and the eye reads proportions, not three lines.
  used_ = makeGraph(tr("used"), seq_color(1), plot_->yAxis, false);
  used_->setBrush(QColor(0x4e, 0x79, 0xa7, 150));
  cached_ = makeGraph(tr("cached"), QColor(0x8a, 0x96, 0xa5), plot_->yAxis, false);
  cached_->setBrush(QColor(0x8a, 0x96, 0xa5, 110));
  cached_->setChannelFillGraph(used_);
  free_ = makeGraph(tr("free"), QColor(0x59, 0xa1, 0x4f), plot_->yAxis, false);
  free_->setPen(QPen(QColor(0x59, 0xa1, 0x4f), 1));
  free_->setBrush(QColor(0x59, 0xa1, 0x4f, 35));
  free_->setChannelFillGraph(cached_);
  tps_ = makeGraph(tr("tokens/s (avg)"), QColor(0xf2, 0x8e, 0x2b), plot_->yAxis2, false);
  tps_->setPen(QPen(QColor(0xf2, 0x8e, 0x2b), 1.5, Qt::DashLine));
  sliding_ = makeGraph(tr("used, sliding layers"), seq_color(1), plot_->yAxis, false);
  sliding_->setPen(QPen(seq_color(1).darker(130), 1.5, Qt::DashLine));
  sliding_->setVisible(false);
  sliding_->removeFromLegend();
  series_ = std::make_unique<ThinnedSeries>(std::vector<QCPGraph*>{used_, cached_, free_, tps_, sliding_}, 0.02);
  // Antialiased curves and stacked fills made a replot cost ~10 ms of the UI thread (Qt's
  // antialiasing rasterizer on a few hundred points), 1.5 ms without; exportPng draws them smooth.
  plot_->setNotAntialiasedElements(QCP::aePlottables | QCP::aeFills);
  preempt_ = plot_->addGraph(plot_->xAxis, plot_->yAxis);
  preempt_->setName(tr("preemption"));
  preempt_->setLineStyle(QCPGraph::lsNone);
  preempt_->setScatterStyle(
      QCPScatterStyle(QCPScatterStyle::ssTriangleInverted, QColor(0xc6, 0x28, 0x28), QColor(0xe1, 0x57, 0x59), 10));

  follow_ = new QCheckBox(tr("Follow"));
  follow_->setChecked(true);
  follow_->setToolTip(tr("Keep the newest samples in view; dragging or zooming the plot turns this off."));
  auto* png = new QPushButton(tr("Export PNG…"));
  auto* csv = new QPushButton(tr("Export CSV…"));
  auto* reset = new QPushButton(tr("Reset view"));
  info_ = new LiveLabel;
  stateInfo_ = new LiveLabel;
  stateInfo_->setToolTip(
      tr("A hybrid model keeps two kinds of memory: each sequence's recurrent state (conv and recurrent state of "
         "every recurrent layer: the same bytes at any length) and the attention layers' KV, which grows with "
         "every token."));
  stateInfo_->hide();
  auto* row = new QHBoxLayout;
  row->addWidget(info_, 1);
  row->addWidget(follow_);
  row->addWidget(reset);
  row->addWidget(png);
  row->addWidget(csv);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addWidget(plot_, 1);
  v->addWidget(stateInfo_);
  v->addLayout(row);

  connect(png, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Export plot"), QStringLiteral("kv-memory.png"),
                                                   tr("PNG images (*.png)"));
    if (!p.isEmpty()) exportPng(p);
  });
  connect(csv, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Export samples"), QStringLiteral("kv-memory.csv"),
                                                   tr("CSV files (*.csv)"));
    if (!p.isEmpty()) exportCsv(p);
  });
  connect(reset, &QPushButton::clicked, this, [this] {
    follow_->setChecked(true);
    follow();
  });
  connect(follow_, &QCheckBox::toggled, this, [this](bool on) {
    if (on) follow();
  });
  connect(plot_->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this](const QCPRange& r) {
    if (programmaticRange_) return;
    follow_->setChecked(false);  // the user took over the view
    emit xRangeChanged(r.lower, r.upper);
  });
  replotTimer_ = new QTimer(this);
  replotTimer_->setSingleShot(true);
  replotTimer_->setInterval(100);
  connect(replotTimer_, &QTimer::timeout, this, [this] {
    if (!isVisible()) return;  // showEvent replots
    replotPending_ = false;
    plot_->replot();
  });
  applyTheme();
  restyle_on_palette_change(this, [this] { applyTheme(); });
}

MemoryPanel::~MemoryPanel() = default;

void MemoryPanel::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  // Five legend entries fit on one line only in a wide plot.
  const int wrap = width() < 760 ? 3 : 5;
  if (plot_->legend->wrap() != wrap) {
    plot_->legend->setWrap(wrap);
    requestReplot();
  }
}

void MemoryPanel::requestReplot() {
  // A QCustomPlot replot with filled areas costs ~10 ms; the UI thread must not pay it for
  // every snapshot.
  replotPending_ = true;
  if (!replotTimer_->isActive()) replotTimer_->start();
}

void MemoryPanel::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (replotPending_) requestReplot();
}

void MemoryPanel::applyTheme() { style_plot(plot_, palette()); }

void MemoryPanel::clear() {
  samples_.clear();
  sliding_->setVisible(false);  // the next engine may have one KV group
  sliding_->removeFromLegend();
  used_->setName(tr("used"));
  stateInfo_->hide();
  sharedEnd_ = 0;
  maxTotal_ = 0;
  maxTps_ = 0;
  series_->clear();
  preempt_->data()->clear();
  follow_->setChecked(true);
  follow();
}

void MemoryPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch&) {
  if (!snap) return;
  // A new engine restarts its clock: start a new series rather than draw a line back in time.
  if (!samples_.empty() && (snap->elapsed_s < samples_.back().t || snap->step < samples_.back().step)) clear();
  if (!samples_.empty() && snap->step == samples_.back().step && snap->memory.blocks_used == samples_.back().used)
    return;
  const MemorySnap& m = snap->memory;
  // The engine's rate is measured over a short window and spikes when a run starts; a 0.3 s
  // exponential average reads better and keeps the axis from being scaled by one outlier.
  double tps = snap->tokens_per_s;
  if (!samples_.empty()) {
    const double dt = std::max(0.0, snap->elapsed_s - samples_.back().t);
    const double a = 1.0 - std::exp(-dt / 0.3);
    tps = samples_.back().tokensPerS + a * (snap->tokens_per_s - samples_.back().tokensPerS);
  } else {
    tps = 0;
  }
  // The hybrid KV cache's sliding pool (group 1): its own blocks, of another size, so a line
  // of its own rather than part of the stack.
  const KvGroupSnap* sliding = snap->kv_groups.size() > 1 ? &snap->kv_groups[1] : nullptr;
  Sample s{snap->elapsed_s,
           snap->step,
           m.blocks_used,
           m.blocks_cached,
           m.blocks_free,
           tps,
           m.waste_pct,
           snap->counters.preemptions,
           sliding ? sliding->blocks_used : 0,
           sliding ? sliding->blocks_total : 0,
           snap->state.on ? snap->state.bytes_per_slot * snap->state.slots_used : 0,
           m.kv_used_bytes};
  if (sliding && !sliding_->visible()) {
    sliding_->setVisible(true);
    sliding_->addToLegend();
    used_->setName(tr("used, global layers"));
  }
  const bool preempted = !samples_.empty() && s.preemptions > samples_.back().preemptions;
  samples_.push_back(s);
  maxTotal_ = std::max({maxTotal_, s.used + s.cached + s.free, s.slidingUsed});
  maxTps_ = std::max(maxTps_, s.tokensPerS);
  series_->add(s.t,
               {static_cast<double>(s.used), static_cast<double>(s.used + s.cached),
                static_cast<double>(s.used + s.cached + s.free), s.tokensPerS, static_cast<double>(s.slidingUsed)});
  if (preempted) preempt_->addData(s.t, s.used);
  QString text = tr("step %1 · used %2 · cached %3 · free %4 · %5 tok/s · preemptions %6")
                     .arg(s.step)
                     .arg(s.used)
                     .arg(s.cached)
                     .arg(s.free)
                     .arg(s.tokensPerS, 0, 'f', 0)
                     .arg(s.preemptions);
  if (sliding) text += tr(" · sliding layers %1 / %2").arg(s.slidingUsed).arg(s.slidingTotal);
  info_->setText(text);
  if (snap->state.on) showStateLine(*snap);
  // Each pool's layers, head shape and (gemma4) the layers that read its KV without storing any.
  QStringList pools;
  for (const KvGroupSnap& g : snap->kv_groups)
    pools << tr("%1: %2 layers, %3 B per block")
                 .arg(QString::fromStdString(g.name))
                 .arg(g.n_layers)
                 .arg(g.bytes_per_block);
  info_->setToolTip(pools.join(QLatin1Char('\n')));
  if (follow_->isChecked())
    follow();
  else
    requestReplot();
}

// The two costs of a hybrid model apart: what each sequence holds whatever its length, and what
// the tokens add.
void MemoryPanel::showStateLine(const Snapshot& s) {
  const Sample& x = samples_.back();
  const QLocale en(QLocale::English);
  auto bytes = [&](qint64 n) { return en.formattedDataSize(n, 1, QLocale::DataSizeIecFormat); };
  stateInfo_->setText(tr("<b>Fixed per sequence</b>: %1 state slots × %2 = <b>%3</b> · <b>per token</b>: %4 tokens "
                         "× %5 B (attention layers only) in %6 blocks = <b>%7</b>")
                          .arg(s.state.slots_used)
                          .arg(bytes(s.state.bytes_per_slot))
                          .arg(bytes(x.stateBytes))
                          .arg(s.memory.slots_filled)
                          .arg(s.memory.kv_bytes_per_token)
                          .arg(s.memory.blocks_used)
                          .arg(bytes(x.kvBytes)));
  if (!stateInfo_->isVisible()) stateInfo_->show();
}

void MemoryPanel::follow() {
  programmaticRange_ = true;
  const double t1 = std::max(samples_.empty() ? 1.0 : std::max(samples_.back().t, 1e-3), sharedEnd_);
  const double t0 = 0.0;  // engine time starts at 0 when the engine is built
  plot_->xAxis->setRange(t0, t0 + (t1 - t0) * 1.02 + 1e-3);
  plot_->yAxis->setRange(0, std::max(1, maxTotal_) * 1.25);  // headroom for the legend
  plot_->yAxis2->setRange(0, std::max(1.0, maxTps_) * 1.1);
  programmaticRange_ = false;
  requestReplot();
}

void MemoryPanel::setSharedEnd(double t) {
  if (t <= sharedEnd_) return;
  sharedEnd_ = t;
  if (follow_->isChecked()) follow();
}

void MemoryPanel::setXRange(double lo, double hi) {
  programmaticRange_ = true;
  follow_->setChecked(false);
  plot_->xAxis->setRange(lo, hi);
  programmaticRange_ = false;
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

bool MemoryPanel::exportPng(const QString& path, int width, int height) {
  plot_->setAntialiasedElements(QCP::aePlottables | QCP::aeFills);
  const bool ok = plot_->savePng(path, width, height);
  plot_->setNotAntialiasedElements(QCP::aePlottables | QCP::aeFills);
  return ok;
}

bool MemoryPanel::exportCsv(const QString& path) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
  QTextStream out(&f);
  out << "time_s,step,blocks_used,blocks_cached,blocks_free,tokens_per_s_avg,waste_pct,preemptions,"
         "sliding_blocks_used,sliding_blocks_total,state_bytes,kv_bytes\n";
  for (const Sample& s : samples_)
    out << s.t << ',' << s.step << ',' << s.used << ',' << s.cached << ',' << s.free << ',' << s.tokensPerS << ','
        << s.wastePct << ',' << s.preemptions << ',' << s.slidingUsed << ',' << s.slidingTotal << ',' << s.stateBytes
        << ',' << s.kvBytes << '\n';
  return true;
}

}  // namespace kvscope::ui
