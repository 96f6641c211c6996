#include "widgets/state_strip_widget.h"

#include <QEvent>
#include <QHelpEvent>
#include <QLocale>
#include <QPainter>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

#include "widgets/live_label.h"
#include "widgets/seq_palette.h"

namespace kvscope::ui {

namespace {

constexpr int kCell = 12, kGap = 2, kCheckpointRows = 2;

QString bytes(qint64 n) { return QLocale(QLocale::English).formattedDataSize(n, 1, QLocale::DataSizeIecFormat); }

}  // namespace

StateStripWidget::StateStripWidget(QWidget* parent) : QWidget(parent) {
  slotsLine_ = new LiveLabel;
  checkpointsLine_ = new LiveLabel;
  slotCells_ = new QWidget;
  checkpointCells_ = new QWidget;
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 4, 0, 0);
  v->setSpacing(2);
  v->addWidget(slotsLine_);
  v->addWidget(slotCells_);
  v->addWidget(checkpointsLine_);
  v->addWidget(checkpointCells_);
  for (QWidget* w : {slotCells_, checkpointCells_}) w->installEventFilter(this);
  setToolTip(
      tr("Recurrent state: each running sequence holds one slot with the conv and recurrent state of every "
         "recurrent layer, the same bytes whatever its length. Checkpoints are saved states at block "
         "boundaries: a prefix-cache hit restores one and recomputes the rest."));
  hide();
}

void StateStripWidget::clear() {
  owners_.clear();
  checkpointTokens_.clear();
  checkpointsHeld_ = checkpointSlots_ = pending_ = 0;
  hide();
}

void StateStripWidget::setSnapshot(const Snapshot& s) {
  const StateSnap& t = s.state;
  if (!t.on) {
    if (isVisible() || !owners_.empty()) clear();
    return;
  }
  std::vector<SeqId> owners(static_cast<size_t>(std::max(0, t.slots_total)), -1);
  ownerLabels_.assign(owners.size(), QString());
  ownerTokens_.assign(owners.size(), 0);
  for (const SeqSnap& q : s.seqs)
    if (q.state_slot >= 0 && q.state_slot < static_cast<int32_t>(owners.size())) {
      const auto i = static_cast<size_t>(q.state_slot);
      owners[i] = q.id;
      ownerLabels_[i] = QString::fromStdString(q.label);
      ownerTokens_[i] = q.num_computed;
    }
  std::vector<int32_t> ckpt;
  int pending = 0;
  for (const StateSnap::Checkpoint& c : t.checkpoints) {
    ckpt.push_back(c.tokens);
    pending += c.pending ? 1 : 0;
  }
  std::sort(ckpt.rbegin(), ckpt.rend());
  owners_ = std::move(owners);
  checkpointTokens_ = std::move(ckpt);
  checkpointsHeld_ = t.checkpoints_used;
  checkpointSlots_ = t.checkpoints_total;
  pending_ = pending;
  bytesPerSlot_ = t.bytes_per_slot;
  dtype_ = QString::fromStdString(t.dtype);
  policy_ = QString::fromStdString(t.checkpoint_policy);
  slotsLine_->setText(slotsLine());
  checkpointsLine_->setText(checkpointsLine());
  if (!isVisible()) show();
  relayout();
  slotCells_->update();
  checkpointCells_->update();
}

QString StateStripWidget::caption() const { return slotsLine() + QLatin1Char('\n') + checkpointsLine(); }

QString StateStripWidget::slotsLine() const {
  const auto held = std::count_if(owners_.begin(), owners_.end(), [](SeqId id) { return id >= 0; });
  return tr("<b>Recurrent state</b> (%1): %2/%3 slots · <b>%4 per sequence</b>, any length")
      .arg(dtype_)
      .arg(held)
      .arg(owners_.size())
      .arg(bytes(bytesPerSlot_));
}

QString StateStripWidget::checkpointsLine() const {
  if (checkpointSlots_ > 0)
    return tr("<b>State checkpoints</b> (%1): %2/%3 held, %4%5")
        .arg(policy_)
        .arg(checkpointsHeld_)
        .arg(checkpointSlots_)
        .arg(bytes(bytesPerSlot_ * checkpointsHeld_))
        .arg(pending_ > 0 ? tr(" (%1 being written)").arg(pending_) : QString());
  return tr("<b>No state checkpoints</b>: no prefix-cache hits");
}

int StateStripWidget::perRow() const { return std::max(1, (slotCells_->width() + kGap) / (kCell + kGap)); }

int StateStripWidget::checkpointCells() const {
  return std::min(static_cast<int>(checkpointTokens_.size()), perRow() * kCheckpointRows);
}

QRect StateStripWidget::cellRect(int k) const {
  const int n = perRow();
  return QRect((k % n) * (kCell + kGap), (k / n) * (kCell + kGap), kCell, kCell);
}

void StateStripWidget::relayout() {
  auto height_for = [this](int cells) { return cells > 0 ? cellRect(cells - 1).bottom() + 2 : 0; };
  const int slot_px = height_for(static_cast<int>(owners_.size())), ckpts = height_for(checkpointCells());
  if (slotCells_->minimumHeight() != slot_px) slotCells_->setFixedHeight(slot_px);
  if (checkpointCells_->minimumHeight() != ckpts) checkpointCells_->setFixedHeight(ckpts);
}

QString StateStripWidget::slotTip(int k) const {
  const auto i = static_cast<size_t>(k);
  if (owners_[i] < 0) return tr("state slot %1: free (%2 when a sequence takes it)").arg(k).arg(bytes(bytesPerSlot_));
  return tr("state slot %1: %2 (seq %3), %4 tokens folded into %5")
      .arg(k)
      .arg(ownerLabels_[i])
      .arg(owners_[i])
      .arg(ownerTokens_[i])
      .arg(bytes(bytesPerSlot_));
}

QString StateStripWidget::checkpointTip(int k) const {
  QString tip = tr("checkpoint: the state after the first %1 tokens of a prefix, %2")
                    .arg(checkpointTokens_[static_cast<size_t>(k)])
                    .arg(bytes(bytesPerSlot_));
  const int hidden = static_cast<int>(checkpointTokens_.size()) - checkpointCells();
  if (hidden > 0) tip += tr("\n(longest first; %1 shorter ones not drawn)").arg(hidden);
  return tip;
}

bool StateStripWidget::eventFilter(QObject* o, QEvent* e) {
  const bool in_slots = o == slotCells_;
  if (!in_slots && o != checkpointCells_) return QWidget::eventFilter(o, e);
  const int n = in_slots ? static_cast<int>(owners_.size()) : checkpointCells();
  if (e->type() == QEvent::Resize) {
    relayout();
    return false;
  }
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const int per_row = perRow();
    const int k = (he->pos().y() / (kCell + kGap)) * per_row + he->pos().x() / (kCell + kGap);
    if (he->pos().x() / (kCell + kGap) < per_row && k >= 0 && k < n)
      QToolTip::showText(he->globalPos(), in_slots ? slotTip(k) : checkpointTip(k), static_cast<QWidget*>(o),
                         cellRect(k));
    else
      QToolTip::hideText();
    return true;
  }
  if (e->type() != QEvent::Paint) return false;
  QPainter p(static_cast<QWidget*>(o));
  const MapColors mc = map_colors(is_dark(palette().color(QPalette::Window)));
  for (int k = 0; k < n; ++k) {
    const QRect r = cellRect(k);
    const SeqId id = in_slots ? owners_[static_cast<size_t>(k)] : -1;
    p.fillRect(r, in_slots ? (id >= 0 ? seq_color(id) : mc.free) : mc.cached);
    if (!in_slots) {  // a saved state: a diamond, as on the prefix tree's blocks
      p.setPen(Qt::NoPen);
      p.setBrush(mc.text);
      const QPoint m = r.center();
      p.drawPolygon(
          QPolygon({{m.x(), r.top() + 2}, {r.right() - 2, m.y()}, {m.x(), r.bottom() - 2}, {r.left() + 2, m.y()}}));
    }
    p.setPen(mc.freeBorder);
    p.setBrush(Qt::NoBrush);
    p.drawRect(r.adjusted(0, 0, -1, -1));
  }
  return true;
}

}  // namespace kvscope::ui
