#include "panels/captions_panel.h"

#include <QLabel>
#include <QListWidget>
#include <QPainter>
#include <QPushButton>
#include <QHBoxLayout>
#include <QVBoxLayout>
#include <map>

#include "widgets/seq_palette.h"
#include "telemetry/block_events.h"

namespace kvscope::ui {

namespace {

constexpr int kMaxCaptions = 1000;
constexpr size_t kDetailLimit = 16;  // more events than this in one batch get summarised

QColor kind_color(BlockEventKind k) {
  switch (k) {
    case BlockEventKind::Allocated:
      return QColor(0x4e, 0x79, 0xa7);
    case BlockEventKind::Freed:
      return QColor(0x8a, 0x96, 0xa5);
    case BlockEventKind::Shared:
      return QColor(0xb0, 0x7a, 0xa1);
    case BlockEventKind::CopiedOnWrite:
      return QColor(0x76, 0xb7, 0xb2);
    case BlockEventKind::Cached:
      return QColor(0x6f, 0x7d, 0x8c);
    case BlockEventKind::CacheHit:
      return QColor(0x59, 0xa1, 0x4f);
    case BlockEventKind::Evicted:
      return QColor(0xf2, 0x8e, 0x2b);
    case BlockEventKind::Preempted:
      return QColor(0xe1, 0x57, 0x59);
    case BlockEventKind::DroppedOutOfWindow:
      return QColor(0xc6, 0x28, 0x28);
  }
  return Qt::gray;
}

QIcon paint_dot_icon(const QColor& c) {
  QPixmap pm(12, 12);
  pm.fill(Qt::transparent);
  QPainter p(&pm);
  p.setRenderHint(QPainter::Antialiasing);
  p.setBrush(c);
  p.setPen(Qt::NoPen);
  p.drawEllipse(1, 1, 10, 10);
  return QIcon(pm);
}

// Painted once per kind, not once per caption.
const QIcon& dot_icon(BlockEventKind k) {
  static std::map<BlockEventKind, QIcon> cache;
  auto it = cache.find(k);
  if (it == cache.end()) it = cache.emplace(k, paint_dot_icon(kind_color(k))).first;
  return it->second;
}

}  // namespace

QString event_caption(const BlockEvent& e, const Snapshot* snap) {
  QString text = QString::fromStdString(describe_block_event(e));
  // Name the sequence the way the rest of the window does ("chat", "shared 3"...).
  if (snap && e.seq >= 0) {
    for (const SeqSnap& q : snap->seqs)
      if (q.id == e.seq) {
        text.replace(QStringLiteral("sequence %1").arg(e.seq),
                     QStringLiteral("sequence %1 (%2)").arg(e.seq).arg(QString::fromStdString(q.label)));
        break;
      }
  }
  return QObject::tr("step %1 · %2").arg(e.step).arg(text);
}

CaptionsPanel::CaptionsPanel(QWidget* parent) : QWidget(parent) {
  header_ =
      new QLabel(tr("Single-step the engine (Workload ▸ Step, or F10) to read each block event of a step. "
                    "While it runs, busy steps are summarised."));
  header_->setWordWrap(true);
  list_ = new QListWidget;
  // One line per caption, all the same height: appending then costs O(1) layout instead of
  // re-wrapping every caption in the list (which held the UI thread for tens of ms per
  // snapshot). A caption too long for the dock is elided; its tooltip has the whole sentence.
  list_->setWordWrap(false);
  list_->setUniformItemSizes(true);
  list_->setTextElideMode(Qt::ElideRight);
  list_->setAlternatingRowColors(true);
  auto* clearBtn = new QPushButton(tr("Clear"));
  auto* row = new QHBoxLayout;
  row->addWidget(header_, 1);
  row->addWidget(clearBtn, 0, Qt::AlignTop);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addLayout(row);
  v->addWidget(list_, 1);
  connect(clearBtn, &QPushButton::clicked, this, &CaptionsPanel::clear);
}

void CaptionsPanel::clear() {
  list_->clear();
  lastStep_ = 0;
}

int CaptionsPanel::captionCount() const { return list_->count(); }
QString CaptionsPanel::caption(int i) const { return list_->item(i) ? list_->item(i)->text() : QString(); }

void CaptionsPanel::append(const QString& text, BlockEventKind kind, bool summary) {
  auto* it = new QListWidgetItem(dot_icon(kind), text);
  it->setToolTip(text);
  if (summary) {
    QFont f = it->font();
    f.setItalic(true);
    it->setFont(f);
  }
  list_->addItem(it);
}

void CaptionsPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch& events) {
  if (!events || events->empty()) return;
  const auto& ev = *events;
  const bool atBottom = list_->count() == 0 || list_->currentRow() < 0;
  if (ev.size() <= kDetailLimit) {
    for (const BlockEvent& e : ev) append(event_caption(e, snap.get()), e.kind, false);
  } else {
    // Summarise: "steps 12–30: 40 allocated, 12 freed, 6 cache hits".
    std::map<BlockEventKind, int> counts;
    for (const BlockEvent& e : ev) ++counts[e.kind];
    QStringList parts;
    BlockEventKind top = ev.front().kind;
    int topN = 0;
    for (const auto& [k, n] : counts) {
      parts << QStringLiteral("%1 %2").arg(n).arg(
          QString::fromUtf8(block_event_name(k)).replace(QLatin1Char('_'), QLatin1Char(' ')));
      if (n > topN) top = k, topN = n;
    }
    const uint64_t s0 = ev.front().step, s1 = ev.back().step;
    const QString range = s0 == s1 ? tr("step %1").arg(s0) : tr("steps %1–%2").arg(s0).arg(s1);
    append(tr("%1 · %2 block events: %3").arg(range).arg(ev.size()).arg(parts.join(QStringLiteral(", "))), top, true);
  }
  while (list_->count() > kMaxCaptions) delete list_->takeItem(0);
  if (atBottom) list_->scrollToBottom();
  lastStep_ = ev.back().step;
}

}  // namespace kvscope::ui
