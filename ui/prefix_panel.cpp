#include "prefix_panel.h"

#include <QDateTime>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QScrollArea>
#include <QSplitter>
#include <QTimer>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <functional>
#include <unordered_map>

#include "seq_palette.h"
#include "theme.h"

namespace kvscope::ui {

namespace {

constexpr int kBarRow = 18;
constexpr int kMaxBars = 64;
constexpr qint64 kMinRebuildMs = 250;  // a tree rebuild costs more than a repaint: ~4 per second

QIcon swatch(const QColor& c) {
  QPixmap pm(12, 12);
  pm.fill(c);
  return QIcon(pm);
}

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
  p.drawText(QRect(6, 2, width() - 12, 18), Qt::AlignLeft | Qt::AlignVCenter, tr("Prompt tokens per request: cached / computed"));
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
  tree_ = new QTreeWidget;
  tree_->setColumnCount(4);
  tree_->setHeaderLabels({tr("block chain"), tr("refs"), tr("sequences"), tr("tokens")});
  tree_->setUniformRowHeights(true);
  tree_->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  tree_->header()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  tree_->setToolTip(tr("Each path from the top is a chain of blocks (logical order). A block that several sequences "
                       "walk through is shared: computed once, referenced by all of them (refs)."));
  bars_ = new CachedBarsWidget;
  QScrollArea* barsScroll = scroll_area(bars_);
  auto* split = new QSplitter;
  split->addWidget(tree_);
  split->addWidget(barsScroll);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addWidget(counters_);
  v->addWidget(split, 1);
}

void PrefixPanel::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (pending_ && pending_ != shown_) rebuildSoon(pending_);
}

void PrefixPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch&) {
  // The tree is the costliest panel to rebuild: a hidden tab only keeps the newest snapshot.
  if (isVisible()) rebuildSoon(snap);
  else pending_ = snap;
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

  tree_->setUpdatesEnabled(false);
  tree_->clear();
  // 1) The trie of block chains: one node per shared physical block, children in chain order,
  //    plus one leaf per sequence for the blocks only it holds.
  struct Node {
    std::vector<BlockId> blocks;
    size_t firstLogical = 0;
    int refs = 0;
    QStringList seqs;
    QString text;
    SeqId colorSeq = -1;
    bool isPrivate = false, partial = false;
    std::vector<int> children;
  };
  std::vector<Node> nodes(1);  // nodes[0]: the root
  std::unordered_map<BlockId, int> nodeOf;
  const size_t bs = static_cast<size_t>(snap->block_size);
  auto text_of = [&](const SeqSnap& q, size_t li, size_t nblocks, int lastFilled) {
    if (!vocab_) return QString();
    const size_t lo = li * bs;
    const size_t hi = std::min(q.tokens.size(), (li + nblocks - 1) * bs + static_cast<size_t>(std::max(0, lastFilled)));
    QString t = lo < hi ? vocab_->text(q.tokens.data() + lo, hi - lo) : QString();
    return t.replace(QLatin1Char('\n'), QStringLiteral("↵"));
  };
  for (const SeqSnap& q : snap->seqs) {
    if (q.block_table.empty()) continue;
    const QString label = QString::fromStdString(q.label);
    int parent = 0;
    size_t li = 0;
    for (; li < q.block_table.size(); ++li) {
      const BlockId b = q.block_table[li];
      if (b == kNoBlock) continue;
      const BlockSnap& s = snap->blocks[static_cast<size_t>(b)];
      auto it = nodeOf.find(b);
      if (it == nodeOf.end()) {
        if (s.ref_count <= 1) break;  // from here on the chain is private to this sequence
        Node n;
        n.blocks = {b};
        n.firstLogical = li;
        n.refs = s.ref_count;
        n.text = text_of(q, li, 1, s.filled);
        n.colorSeq = s.owner;
        n.partial = !s.hashed;
        nodes.push_back(n);
        it = nodeOf.emplace(b, static_cast<int>(nodes.size() - 1)).first;
        nodes[static_cast<size_t>(parent)].children.push_back(it->second);
      }
      Node& n = nodes[static_cast<size_t>(it->second)];
      if (!n.seqs.contains(label)) n.seqs << label;
      parent = it->second;
    }
    Node leaf;
    leaf.isPrivate = true;
    leaf.firstLogical = li;
    leaf.refs = 1;
    leaf.seqs << label;
    leaf.colorSeq = q.id;
    for (size_t lj = li; lj < q.block_table.size(); ++lj)
      if (q.block_table[lj] != kNoBlock) leaf.blocks.push_back(q.block_table[lj]);
    if (leaf.blocks.empty()) continue;
    const BlockSnap& last = snap->blocks[static_cast<size_t>(leaf.blocks.back())];
    leaf.text = text_of(q, li, q.block_table.size() - li, last.filled);
    nodes.push_back(leaf);
    nodes[static_cast<size_t>(parent)].children.push_back(static_cast<int>(nodes.size() - 1));
  }
  // 2) Radix compression: a run of shared blocks walked by exactly the same sequences is one
  //    edge of the tree, not a staircase of single-block nodes.
  for (size_t k = 1; k < nodes.size(); ++k) {
    Node& n = nodes[k];
    if (n.isPrivate || n.blocks.empty()) continue;
    while (n.children.size() == 1) {
      Node& c = nodes[static_cast<size_t>(n.children.front())];
      if (c.isPrivate || c.refs != n.refs || c.seqs != n.seqs) break;
      n.blocks.insert(n.blocks.end(), c.blocks.begin(), c.blocks.end());
      n.text += c.text;
      n.partial = c.partial;
      std::vector<int> grand = std::move(c.children);
      c.blocks.clear();  // absorbed
      n.children = std::move(grand);
    }
  }
  // 3) Items.
  std::function<void(int, QTreeWidgetItem*)> emitNode = [&](int idx, QTreeWidgetItem* parentItem) {
    for (int ci : nodes[static_cast<size_t>(idx)].children) {
      const Node& n = nodes[static_cast<size_t>(ci)];
      auto* item = new QTreeWidgetItem(parentItem);
      QStringList ids;
      for (size_t k = 0; k < n.blocks.size() && k < 6; ++k) ids << QString::number(n.blocks[k]);
      if (n.blocks.size() > 6) ids << QStringLiteral("…");
      const size_t lastLogical = n.firstLogical + n.blocks.size() - 1;
      const QString logical = n.blocks.size() == 1 ? tr("logical %1").arg(n.firstLogical)
                                                   : tr("logical %1–%2").arg(n.firstLogical).arg(lastLogical);
      if (n.isPrivate) {
        item->setText(0, tr("%n private block(s): %1", nullptr, static_cast<int>(n.blocks.size())).arg(ids.join(QStringLiteral(", "))));
      } else {
        item->setText(0, tr("%n shared block(s): %1 · %2%3", nullptr, static_cast<int>(n.blocks.size()))
                             .arg(ids.join(QStringLiteral(", ")), logical, n.partial ? tr(" (last one partial)") : QString()));
        QFont f = item->font(0);
        f.setBold(true);
        item->setFont(0, f);
      }
      item->setIcon(0, swatch(seq_color(n.colorSeq)));
      item->setText(1, QString::number(n.refs));
      item->setText(2, n.seqs.size() <= 2 ? n.seqs.join(QStringLiteral(", "))
                                          : tr("%1 sequences (%2, …)").arg(n.seqs.size()).arg(n.seqs.front()));
      item->setToolTip(2, n.seqs.join(QStringLiteral(", ")));
      item->setText(3, n.text);
      item->setToolTip(3, n.text);
      emitNode(ci, item);
    }
  };
  emitNode(0, tree_->invisibleRootItem());
  if (snap->memory.blocks_cached > 0) {
    auto* cachedItem = new QTreeWidgetItem(tree_);
    cachedItem->setText(0, tr("%1 cached block(s) with no live owner").arg(snap->memory.blocks_cached));
    cachedItem->setText(1, QStringLiteral("0"));
    cachedItem->setText(3, tr("evictable: reused on a hash hit, recycled (LRU) when the pool needs space"));
  }
  tree_->expandAll();
  tree_->setUpdatesEnabled(true);
}

}  // namespace kvscope::ui
