#include "attach_view/attach_overlap_panel.h"

#include <qcustomplot.h>

#include <QLabel>
#include <QVBoxLayout>
#include <algorithm>

#include "widgets/theme.h"

namespace kvscope::ui {
namespace {

std::vector<double> heights(const QCPBars* b) {
  std::vector<double> v;
  for (auto it = b->data()->constBegin(); it != b->data()->constEnd(); ++it) v.push_back(it->value);
  return v;
}

QCPBars* bars(QCPAxisRect* r, const QColor& c, const QString& name) {
  auto* b = new QCPBars(r->axis(QCPAxis::atBottom), r->axis(QCPAxis::atLeft));
  b->setName(name);
  b->setPen(QPen(c.darker(130)));
  b->setBrush(c);
  b->setWidth(0.6);
  return b;
}

// Integer ticks labelled with text (1, 2, 3 … instances; the instances' names).
void text_ticks(QCPAxis* axis, const QVector<double>& at, const QVector<QString>& labels) {
  QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
  t->addTicks(at, labels);
  axis->setTicker(t);
  axis->setRange(0.4, std::max(1.0, static_cast<double>(at.size())) + 0.6);
}

}  // namespace

AttachOverlapPanel::AttachOverlapPanel(QWidget* parent) : QWidget(parent) {
  numbers_ = new QLabel(tr("No prefix cached yet."), this);
  numbers_->setObjectName(QStringLiteral("attachOverlapNumbers"));
  numbers_->setWordWrap(true);
  numbers_->setTextFormat(Qt::RichText);
  plot_ = new QCustomPlot(this);
  plot_->setObjectName(QStringLiteral("attachOverlapPlot"));
  plot_->setMinimumHeight(240);
  holdersRect_ = plot_->axisRect();
  instancesRect_ = new QCPAxisRect(plot_);
  plot_->plotLayout()->addElement(0, 1, instancesRect_);
  holdersRect_->axis(QCPAxis::atBottom)->setLabel(tr("instances holding the prefix"));
  holdersRect_->axis(QCPAxis::atLeft)->setLabel(tr("prefixes (blocks)"));
  instancesRect_->axis(QCPAxis::atBottom)->setLabel(tr("instance"));
  instancesRect_->axis(QCPAxis::atLeft)->setLabel(tr("blocks it holds"));
  holders_ = bars(holdersRect_, QColor(0x4e, 0x79, 0xa7), tr("prefixes"));
  unique_ = bars(instancesRect_, QColor(0x8a, 0x96, 0xa5), tr("only here"));
  shared_ = bars(instancesRect_, QColor(0xe1, 0x57, 0x59), tr("also on another instance"));
  shared_->moveAbove(unique_);  // stacked: the bar's height is what the instance holds
  holders_->removeFromLegend();
  plot_->legend->setVisible(true);
  holdersRect_->insetLayout()->take(plot_->legend);  // the legend belongs to the per-instance bars
  holdersRect_->insetLayout()->simplify();
  instancesRect_->insetLayout()->addElement(plot_->legend, Qt::AlignTop | Qt::AlignRight);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addWidget(numbers_);
  v->addWidget(plot_, 1);
  style_plot(plot_, palette());
  restyle_on_palette_change(this, [this] { style_plot(plot_, palette()); });
}

void AttachOverlapPanel::setPicture(const std::shared_ptr<const AttachPicture>& p) {
  if (!p) return;
  const attach::FleetSharing& f = p->sharing;
  const attach::FleetOverlap& o = f.overlap;
  numbers_->setText(
      tr("<b>%1</b> distinct prefixes (blocks) over the fleet, <b>%2</b> cached copies · <b>%3</b> prefixes on 2+ instances · "
         "<b>%4</b> blocks (<b>%5</b> tokens) cached more than once · an ideal KV-aware router, sending every prefix to one "
         "instance, would not hold <b>%6%</b> of the cached blocks (<b>%7%</b> of the tokens)")
          .arg(o.nodes)
          .arg(o.copies)
          .arg(o.shared_nodes)
          .arg(o.duplicated_blocks)
          .arg(o.duplicated_tokens)
          .arg(100 * o.ideal_router_saving, 0, 'f', 1)
          .arg(100 * f.ideal_router_token_saving, 0, 'f', 1));
  QVector<double> k, nodes, at, only, also;
  QVector<QString> kLabels, names;
  double top = 1, topInst = 1;
  for (const attach::HolderCount& h : f.by_holders) {
    k.push_back(static_cast<double>(h.holders));
    nodes.push_back(static_cast<double>(h.nodes));
    kLabels.push_back(QString::number(h.holders));
    top = std::max(top, static_cast<double>(h.nodes));
  }
  for (size_t i = 0; i < f.per_instance.size(); ++i) {
    const attach::InstanceSharing& s = f.per_instance[i];
    at.push_back(static_cast<double>(i + 1));
    only.push_back(static_cast<double>(s.nodes - s.shared_nodes));
    also.push_back(static_cast<double>(s.shared_nodes));
    names.push_back(i < p->instances.size() ? QStringLiteral("%1 r%2")
                                                  .arg(p->instances[i].endpoint.section(QLatin1Char('/'), -1))
                                                  .arg(p->instances[i].dp_rank)
                                            : QString::number(i));
    topInst = std::max(topInst, static_cast<double>(s.nodes));
  }
  holders_->setData(k, nodes, true);
  unique_->setData(at, only, true);
  shared_->setData(at, also, true);
  text_ticks(holdersRect_->axis(QCPAxis::atBottom), k, kLabels);
  text_ticks(instancesRect_->axis(QCPAxis::atBottom), at, names);
  holdersRect_->axis(QCPAxis::atLeft)->setRange(0, top * 1.15);
  instancesRect_->axis(QCPAxis::atLeft)->setRange(0, topInst * 1.35);  // headroom for the legend
  // A handful of bars: a queued replot is cheap and coalesced by QCustomPlot itself.
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

QString AttachOverlapPanel::numbersText() const { return numbers_->text(); }
std::vector<double> AttachOverlapPanel::holderBars() const { return heights(holders_); }
std::vector<double> AttachOverlapPanel::uniqueBars() const { return heights(unique_); }
std::vector<double> AttachOverlapPanel::sharedBars() const { return heights(shared_); }

}  // namespace kvscope::ui
