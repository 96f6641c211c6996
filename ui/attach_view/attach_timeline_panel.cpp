#include "attach_view/attach_timeline_panel.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "widgets/seq_palette.h"
#include "widgets/theme.h"

namespace kvscope::ui {
namespace {

QCPAxisRect* stacked_rect(QCustomPlot* plot, int row, QCPMarginGroup* margins, const QString& left,
                          const QString& right) {
  QCPAxisRect* r = row == 0 ? plot->axisRect() : new QCPAxisRect(plot);
  if (row > 0) plot->plotLayout()->addElement(row, 0, r);
  r->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
  r->axis(QCPAxis::atLeft)->setLabel(left);
  r->axis(QCPAxis::atRight)->setVisible(!right.isEmpty());
  r->axis(QCPAxis::atRight)->setLabel(right);
  r->axis(QCPAxis::atBottom)->setLabel(row == 2 ? QObject::tr("seconds since the attach started") : QString());
  r->setRangeDrag(Qt::Horizontal);
  r->setRangeZoom(Qt::Horizontal);
  return r;
}

QCPGraph* line(QCPAxisRect* r, QCPAxis* y, const QColor& c, Qt::PenStyle style) {
  QCPGraph* g = r->parentPlot()->addGraph(r->axis(QCPAxis::atBottom), y);
  g->setPen(QPen(c, 1, style));
  g->setAdaptiveSampling(true);
  g->removeFromLegend();
  return g;
}

}  // namespace

AttachTimelinePanel::AttachTimelinePanel(QWidget* parent) : QWidget(parent) {
  plot_ = new QCustomPlot(this);
  plot_->setObjectName(QStringLiteral("attachTimelinePlot"));
  plot_->setMinimumHeight(300);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  auto* margins = new QCPMarginGroup(plot_);
  blocksRect_ = stacked_rect(plot_, 0, margins, tr("cached blocks"), QString());
  ratioRect_ = stacked_rect(plot_, 1, margins, tr("usage — / hit rate - - (%)"), QString());
  rateRect_ = stacked_rect(plot_, 2, margins, tr("events / s —"), tr("lag - - (s)"));
  ratioRect_->axis(QCPAxis::atLeft)->setRange(0, 105);
  // One time axis: panning or zooming any of the three moves all of them.
  for (QCPAxisRect* a : {blocksRect_, ratioRect_, rateRect_})
    for (QCPAxisRect* b : {blocksRect_, ratioRect_, rateRect_})
      if (a != b)
        connect(a->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged),
                b->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::setRange));
  // The legend (one entry per instance) gets a row of its own above the plots, so it never
  // hides the newest samples.
  plot_->legend->setVisible(true);
  plot_->legend->setFillOrder(QCPLegend::foColumnsFirst);
  plot_->legend->setWrap(4);
  blocksRect_->insetLayout()->take(plot_->legend);
  blocksRect_->insetLayout()->simplify();
  plot_->plotLayout()->insertRow(0);
  plot_->plotLayout()->addElement(0, 0, plot_->legend);
  plot_->plotLayout()->setRowStretchFactor(0, 0.001);
  plot_->setNotAntialiasedElements(QCP::aePlottables);  // as the memory panel: ~10x cheaper replots
  follow_ = new QCheckBox(tr("Follow"), this);
  follow_->setChecked(true);
  follow_->setToolTip(tr("Keep the whole attach in view; dragging or zooming the plots turns this off."));
  connect(follow_, &QCheckBox::toggled, this, [this](bool on) {
    if (on) follow();
  });
  connect(blocksRect_->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
    if (!programmaticRange_) follow_->setChecked(false);  // the user took over the view
  });
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addWidget(plot_, 1);
  v->addWidget(follow_);
  replotTimer_ = new QTimer(this);
  replotTimer_->setSingleShot(true);
  replotTimer_->setInterval(100);
  connect(replotTimer_, &QTimer::timeout, this, [this] {
    if (isVisible()) replotNow();  // showEvent replots a hidden tab when it is shown
  });
  style_plot(plot_, palette());
  restyle_on_palette_change(this, [this] { style_plot(plot_, palette()); });
}

AttachTimelinePanel::~AttachTimelinePanel() = default;

void AttachTimelinePanel::ensureInstances(const AttachPicture& p) {
  while (graphs_.size() < p.instances.size()) {
    const size_t i = graphs_.size();
    const QColor c = seq_color(static_cast<SeqId>(i + 1));
    InstanceGraphs g;
    g.cached = line(blocksRect_, blocksRect_->axis(QCPAxis::atLeft), c, Qt::SolidLine);
    g.cached->setPen(QPen(c, 1));
    g.cached->setName(tr("%1 rank %2").arg(p.instances[i].endpoint).arg(p.instances[i].dp_rank));
    g.cached->addToLegend();
    g.preempt = line(blocksRect_, blocksRect_->axis(QCPAxis::atLeft), c, Qt::SolidLine);
    g.preempt->setLineStyle(QCPGraph::lsNone);
    g.preempt->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangleInverted, QColor(0xc6, 0x28, 0x28), c, 10));
    g.usage = line(ratioRect_, ratioRect_->axis(QCPAxis::atLeft), c, Qt::SolidLine);
    g.hit = line(ratioRect_, ratioRect_->axis(QCPAxis::atLeft), c, Qt::DashLine);
    g.events = line(rateRect_, rateRect_->axis(QCPAxis::atLeft), c, Qt::SolidLine);
    g.lag = line(rateRect_, rateRect_->axis(QCPAxis::atRight), c, Qt::DashLine);
    graphs_.push_back(g);
  }
}

void AttachTimelinePanel::fill(InstanceGraphs& g, const std::vector<attach::TimelineSample>& samples) {
  // The hit rate exists only where a scrape saw lookups, the lag only where a live batch came:
  // their lines join the samples that have one (a NaN point would cut them into dots). Usage
  // is NaN only without /metrics, so it is left out there too.
  QVector<double> t, blocks, events, ut, usage, ht, hit, lt, lag, pt, pv;
  for (const attach::TimelineSample& s : samples) {
    t.push_back(s.t);
    blocks.push_back(static_cast<double>(s.cached_blocks));
    events.push_back(s.events_per_s());
    if (!std::isnan(s.usage)) ut.push_back(s.t), usage.push_back(100 * s.usage);
    if (!std::isnan(s.hit_rate())) ht.push_back(s.t), hit.push_back(100 * s.hit_rate());
    if (!std::isnan(s.lag_s())) lt.push_back(s.t), lag.push_back(s.lag_s());
    if (s.preemptions) pt.push_back(s.t), pv.push_back(static_cast<double>(s.cached_blocks));
    maxT_ = std::max(maxT_, s.t + s.dt);
    maxBlocks_ = std::max(maxBlocks_, static_cast<double>(s.cached_blocks));
    maxRate_ = std::max(maxRate_, s.events_per_s());
    maxLag_ = std::fmax(maxLag_, s.lag_s());
  }
  g.cached->setData(t, blocks, true);
  g.usage->setData(ut, usage, true);
  g.hit->setData(ht, hit, true);
  g.events->setData(t, events, true);
  g.lag->setData(lt, lag, true);
  g.preempt->setData(pt, pv, true);
}

void AttachTimelinePanel::setPicture(const std::shared_ptr<const AttachPicture>& p) {
  if (!p) return;
  ensureInstances(*p);
  bool changed = false;
  for (size_t i = 0; i < p->instances.size(); ++i) {
    const AttachInstancePicture& ip = p->instances[i];
    if (ip.timeline_revision == graphs_[i].revision && graphs_[i].revision != 0) continue;  // nothing new
    graphs_[i].revision = ip.timeline_revision;
    fill(graphs_[i], ip.timeline);
    changed = true;
  }
  if (!changed) return;
  if (follow_->isChecked())
    follow();
  else
    requestReplot();
}

void AttachTimelinePanel::follow() {
  programmaticRange_ = true;
  for (QCPAxisRect* r : {blocksRect_, ratioRect_, rateRect_}) r->axis(QCPAxis::atBottom)->setRange(0, maxT_ * 1.02);
  blocksRect_->axis(QCPAxis::atLeft)->setRange(0, maxBlocks_ * 1.1);
  rateRect_->axis(QCPAxis::atLeft)->setRange(0, maxRate_ * 1.1);
  rateRect_->axis(QCPAxis::atRight)->setRange(0, maxLag_ * 1.1);
  programmaticRange_ = false;
  requestReplot();
}

int AttachTimelinePanel::pointCount(size_t instance, Series s) const {
  if (instance >= graphs_.size()) return -1;
  const InstanceGraphs& g = graphs_[instance];
  QCPGraph* graph = s == Series::CachedBlocks ? g.cached
                    : s == Series::Usage      ? g.usage
                    : s == Series::HitRate    ? g.hit
                    : s == Series::EventsPerS ? g.events
                    : s == Series::Lag        ? g.lag
                                              : g.preempt;
  return graph->dataCount();
}

void AttachTimelinePanel::requestReplot() {
  replotPending_ = true;
  if (!replotTimer_->isActive()) replotTimer_->start();
}

void AttachTimelinePanel::replotNow() {
  replotPending_ = false;
  plot_->replot();
}

void AttachTimelinePanel::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (replotPending_) requestReplot();
}

bool AttachTimelinePanel::exportPng(const QString& path, int width, int height) {
  plot_->setAntialiasedElements(QCP::aePlottables);
  const bool ok = plot_->savePng(path, width, height);
  plot_->setNotAntialiasedElements(QCP::aePlottables);
  return ok;
}

}  // namespace kvscope::ui
