#include "panels/prefix_panel.h"

#include <QDateTime>
#include <QLabel>
#include <QPainter>
#include <QScrollArea>
#include <QSplitter>
#include <QTimer>
#include <QVBoxLayout>

#include "widgets/prefix_tree_widget.h"
#include "widgets/seq_palette.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

constexpr int kBarRow = 18;
constexpr int kMaxBars = 64;
constexpr qint64 kMinRebuildMs = 250;  // a tree rebuild costs more than a repaint: ~4 per second

}  // namespace

CachedBarsWidget::CachedBarsWidget(QWidget* parent) : QWidget(parent) {
  setToolTip(tr("Each request's prompt: the green part was found in the prefix cache, the rest was computed."));
}

void CachedBarsWidget::setSnapshot(const SnapshotPtr& s) {
  snap_ = s;
  updateGeometry();
  update();
}

QSize CachedBarsWidget::sizeHint() const {
  const int n = snap_ ? std::min<int>(kMaxBars, static_cast<int>(snap_->seqs.size())) : 0;
  return QSize(260, std::max(60, 24 + n * kBarRow));
}

void CachedBarsWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().color(QPalette::Base));
  const QColor fg = palette().color(QPalette::WindowText);
  p.setPen(fg);
  p.drawText(QRect(6, 2, width() - 12, 18), Qt::AlignLeft | Qt::AlignVCenter,
             tr("Prompt tokens per request: cached / computed"));
  if (!snap_ || snap_->seqs.empty()) return;
  // The newest requests matter most: show the last kMaxBars.
  const auto& seqs = snap_->seqs;
  const size_t first = seqs.size() > kMaxBars ? seqs.size() - kMaxBars : 0;
  int maxLen = 1;
  for (size_t i = first; i < seqs.size(); ++i) maxLen = std::max(maxLen, seqs[i].prompt_len);
  const QFontMetrics fm(font());
  const int labelW = std::min(130, width() / 3);
  const int barW = std::max(20, width() - labelW - 80);
  int y = 22;
  const QColor cached(0x59, 0xa1, 0x4f), computed(0x4e, 0x79, 0xa7);
  for (size_t i = first; i < seqs.size(); ++i, y += kBarRow) {
    const SeqSnap& q = seqs[i];
    p.fillRect(QRect(4, y + 4, 8, 8), seq_color(q.id));
    p.setPen(fg);
    p.drawText(QRect(16, y, labelW - 18, kBarRow), Qt::AlignVCenter | Qt::AlignLeft,
               fm.elidedText(QString::fromStdString(q.label), Qt::ElideRight, labelW - 18));
    const int w = barW * q.prompt_len / maxLen;
    const int wc = q.prompt_len ? w * q.cached_prompt_tokens / q.prompt_len : 0;
    p.fillRect(QRect(labelW, y + 3, w, kBarRow - 6), computed);
    p.fillRect(QRect(labelW, y + 3, wc, kBarRow - 6), cached);
    p.drawText(QRect(labelW + w + 4, y, 80, kBarRow), Qt::AlignVCenter | Qt::AlignLeft,
               QStringLiteral("%1/%2").arg(q.cached_prompt_tokens).arg(q.prompt_len));
  }
}

PrefixPanel::PrefixPanel(QWidget* parent) : QWidget(parent) {
  counters_ = new QLabel;
  counters_->setWordWrap(true);
  treeCaption_ = new QLabel;
  treeCaption_->setWordWrap(true);
  tree_ = new PrefixTreeWidget;
  tree_->setToolTip(
      tr("Each path from the left is a chain of blocks (logical order). A block that several sequences "
         "walk through is shared: computed once, referenced by all of them."));
  bars_ = new CachedBarsWidget;
  QScrollArea* barsScroll = scroll_area(bars_);
  auto* treeBox = new QWidget;
  auto* tv = new QVBoxLayout(treeBox);
  tv->setContentsMargins(0, 0, 0, 0);
  tv->addWidget(treeCaption_);
  tv->addWidget(tree_, 1);
  auto* split = new QSplitter;
  split->addWidget(treeBox);
  split->addWidget(barsScroll);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addWidget(counters_);
  v->addWidget(split, 1);
}

void PrefixPanel::resetForEngine(const ModelInfo& info) {
  source_.reset(info.vocab);
  pending_ = shown_ = nullptr;
  tree_->setNodes({});
}

void PrefixPanel::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (pending_ && pending_ != shown_) rebuildSoon(pending_);
}

void PrefixPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch& events) {
  // Parents and tokens of blocks are only seen while a table holds them: watch every snapshot.
  // The drawing is the costly part: a hidden tab only keeps the newest snapshot.
  if (snap) source_.observe(*snap, events ? *events : snap->events);
  if (isVisible())
    rebuildSoon(snap);
  else
    pending_ = snap;
}

void PrefixPanel::rebuildSoon(const SnapshotPtr& snap) {
  pending_ = snap;
  const qint64 now = QDateTime::currentMSecsSinceEpoch();
  if (now - lastBuildMs_ >= kMinRebuildMs) {
    rebuildNow();
  } else if (!scheduled_) {
    scheduled_ = true;
    QTimer::singleShot(static_cast<int>(kMinRebuildMs - (now - lastBuildMs_)), this, [this] {
      scheduled_ = false;
      rebuildNow();
    });
  }
}

QString PrefixPanel::countersText() const { return counters_->text(); }
QString PrefixPanel::treeCaption() const { return treeCaption_->text(); }

void PrefixPanel::rebuildNow() {
  lastBuildMs_ = QDateTime::currentMSecsSinceEpoch();
  const SnapshotPtr snap = pending_;
  if (!snap || snap == shown_) return;
  shown_ = snap;
  const EngineCounters& c = snap->counters;
  const double hitPct = c.prefix_queries_tokens ? 100.0 * c.prefix_hits_tokens / c.prefix_queries_tokens : 0.0;
  counters_->setText(tr("Prefix caching <b>%1</b> · queried %2 tokens · <b>hit %3 tokens (%4%)</b> · missed %5 · "
                        "evictions %6 · cached-evictable blocks %7")
                         .arg(snap->prefix_caching ? tr("on") : tr("off"))
                         .arg(c.prefix_queries_tokens)
                         .arg(c.prefix_hits_tokens)
                         .arg(hitPct, 0, 'f', 1)
                         .arg(c.prefix_queries_tokens - c.prefix_hits_tokens)
                         .arg(c.evictions)
                         .arg(snap->memory.blocks_cached));
  bars_->setSnapshot(snap);
  tree_->setNodes(source_.nodes(*snap));
  const PrefixTreeLayout& L = tree_->layout();
  QString caption = tr("%1 blocks · %2 shared (ref ≥ 2) · %3 on live paths (orange) · %4 evictable leaves (dashed) · "
                       "darker = more hits, taller = more refs")
                        .arg(L.size())
                        .arg(L.sharedCount())
                        .arg(L.liveCount())
                        .arg(L.evictableLeafCount());
  // Hybrid models: a hit ends at a saved recurrent state, so the diamonds are where hits can stop.
  if (snap->state.on)
    caption += tr(" · ◆ %1 blocks end where a state checkpoint was saved (%2 held): hits end at one")
                   .arg(L.checkpointCount())
                   .arg(snap->state.checkpoints_used);
  treeCaption_->setText(caption);
}

}  // namespace kvscope::ui
