#include "panels/block_map_panel.h"

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QEvent>
#include <QHash>
#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QScrollArea>
#include <QSlider>
#include <QSplitter>
#include <QVBoxLayout>

#include "widgets/block_map_widget.h"
#include "widgets/live_label.h"
#include "widgets/state_strip_widget.h"
#include "widgets/seq_palette.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

// One pixmap per colour, shared by every row of that colour: the list gains and loses rows all
// the time in a busy workload and painting a pixmap per new row showed up in frame times.
QIcon swatch_icon(const QColor& c) {
  static QHash<QRgb, QIcon> cache;
  if (auto it = cache.constFind(c.rgba()); it != cache.constEnd()) return *it;
  if (cache.size() > 512) cache.clear();  // seq_color cycles a palette; this is only a guard
  QPixmap pm(12, 12);
  pm.fill(c);
  return *cache.insert(c.rgba(), QIcon(pm));
}

QString short_state(SeqState s) {
  switch (s) {
    case SeqState::Waiting:
      return QObject::tr("wait");
    case SeqState::Running:
      return QObject::tr("run");
    case SeqState::Preempted:
      return QObject::tr("preempted");
    case SeqState::Finished:
      return QObject::tr("done");
    case SeqState::Cancelled:
      return QObject::tr("cancelled");
    case SeqState::Rejected:
      return QObject::tr("rejected");
  }
  return QString();
}

}  // namespace

BlockMapPanel::BlockMapPanel(QWidget* parent) : QWidget(parent) {
  map_ = new BlockMapWidget;
  scroll_ = scroll_area(map_, /*wrapWidth=*/true);

  list_ = new QListWidget;
  list_->setToolTip(
      tr("Sequences in the newest snapshot. Click one to number its block table on the map "
         "(logical block 0, 1, 2… in order); click again to clear."));
  list_->setMinimumWidth(150);
  list_->setUniformItemSizes(true);

  summary_ = new LiveLabel;
  zoom_ = new QSlider(Qt::Horizontal);
  zoom_->setRange(4, 40);
  zoom_->setValue(map_->cellSize());
  zoom_->setMaximumWidth(110);
  zoom_->setToolTip(tr("Cell size in pixels"));

  fit_ = new QCheckBox(tr("Fit"));
  fit_->setChecked(true);
  fit_->setToolTip(tr("Choose the cell size so the whole pool fits in view (when it can at 6 px or more)."));
  group_ = new QComboBox;
  group_->setToolTip(
      tr("Hybrid KV cache: the model's sliding-window layers and its global layers keep separate "
         "block pools and block tables. The sliding layers' blocks are freed as soon as they fall "
         "out of the window; the global layers keep every block."));
  group_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  groupRow_ = new QWidget;
  auto* groupRow = new QHBoxLayout(groupRow_);
  groupRow->setContentsMargins(0, 0, 0, 0);
  groupRow->addWidget(new QLabel(tr("KV group:")));
  groupRow->addWidget(group_);
  groupRow->addStretch(1);
  groupRow_->hide();
  auto* summaryRow = new QHBoxLayout;
  summaryRow->addWidget(summary_, 1);
  summaryRow->addWidget(fit_, 0, Qt::AlignTop);
  summaryRow->addWidget(zoom_, 0, Qt::AlignTop);

  auto* left = new QWidget;
  auto* lv = new QVBoxLayout(left);
  lv->setContentsMargins(0, 0, 0, 0);
  lv->addWidget(groupRow_);
  lv->addLayout(summaryRow);
  lv->addWidget(new BlockLegend);
  lv->addWidget(scroll_, 1);
  state_ = new StateStripWidget;
  lv->addWidget(state_);
  scroll_->viewport()->installEventFilter(this);

  auto* split = new QSplitter;
  split->addWidget(left);
  split->addWidget(list_);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  split->setSizes({480, 160});
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addWidget(split);

  connect(zoom_, &QSlider::sliderMoved, this, [this](int v) {
    fit_->setChecked(false);  // a manual zoom wins over fitting
    map_->setCellSize(v);
  });
  connect(fit_, &QCheckBox::toggled, this, [this](bool on) {
    if (on) fit();
  });
  connect(group_, &QComboBox::currentIndexChanged, this, [this](int g) {
    if (g < 0) return;
    map_->setGroup(g);
    fit();
    if (const auto& snap = map_->snapshot()) showSnapshot(snap, nullptr);  // summary + list of this group
  });
  connect(list_, &QListWidget::itemClicked, this, [this](QListWidgetItem* it) {
    const SeqId id = it->data(Qt::UserRole).toLongLong();
    map_->setHighlight(map_->highlight() == id ? -1 : id);
    if (map_->highlight() < 0) list_->clearSelection();
  });
  connect(map_, &BlockMapWidget::blockClicked, this, [this](int, qint64 owner) {
    map_->setHighlight(owner == map_->highlight() ? -1 : owner);
    for (int i = 0; i < list_->count(); ++i)
      list_->item(i)->setSelected(list_->item(i)->data(Qt::UserRole).toLongLong() == map_->highlight());
  });
}

void BlockMapPanel::resetForEngine(const ModelInfo& info) {
  setVocab(info.vocab);
  map_->clearHistory();  // the same pool size must not keep the old engine's marks
  state_->clear();
}

void BlockMapPanel::setCompact(bool compact) { list_->setVisible(!compact); }

bool BlockMapPanel::eventFilter(QObject* o, QEvent* e) {
  if (o == scroll_->viewport() && e->type() == QEvent::Resize) fit();
  return QWidget::eventFilter(o, e);
}

void BlockMapPanel::fit() {
  if (!fit_->isChecked()) return;
  const int n = shownBlocks();
  if (n == 0) return;
  const QSize vp = scroll_->viewport()->size();
  // Largest cell for which all n blocks fit in the viewport; below 6 px, scroll instead.
  int best = 6;
  for (int cell = 40; cell >= 6; --cell) {
    const int gap = cell >= 10 ? 2 : 1, pitch = cell + gap;
    const int cols = std::max(1, (vp.width() - gap) / pitch);
    const int rows = (n + cols - 1) / cols;
    if (rows * pitch + gap <= vp.height()) {
      best = cell;
      break;
    }
  }
  if (best != map_->cellSize()) {
    map_->setCellSize(best);
    const QSignalBlocker b(zoom_);
    zoom_->setValue(best);
  }
}

void BlockMapPanel::setVocab(const VocabPtr& v) { map_->setVocab(v); }

int BlockMapPanel::shownBlocks() const {
  const auto& snap = map_->snapshot();
  if (!snap) return 0;
  return static_cast<int>(snap->group_blocks(map_->group() < snap->n_kv_groups() ? map_->group() : 0).size());
}

// The selector appears when the engine keeps several KV groups (hybrid KV cache) and names them.
void BlockMapPanel::refreshGroups(const Snapshot& s) {
  const int n = s.n_kv_groups();
  groupRow_->setVisible(n > 1);
  const QSignalBlocker block(group_);
  if (group_->count() != (n > 1 ? n : 0)) {
    group_->clear();
    if (n > 1)
      for (const KvGroupSnap& g : s.kv_groups) group_->addItem(QString::fromStdString(g.name));
    group_->setCurrentIndex(0);
    map_->setGroup(0);
  }
  for (int i = 0; i < group_->count(); ++i) {
    const KvGroupSnap& g = s.kv_groups[static_cast<size_t>(i)];
    const QString t =
        tr("%1 · %2 layers · %3 blocks").arg(QString::fromStdString(g.name)).arg(g.n_layers).arg(g.blocks_total);
    if (group_->itemText(i) != t) group_->setItemText(i, t);
  }
}

void BlockMapPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch& events) {
  const int before = shownBlocks();
  if (snap) refreshGroups(*snap);
  map_->setSnapshot(snap);
  if (!map_->snapshot() || shownBlocks() != before) fit();
  if (events) map_->applyEvents(*events);
  if (!snap) return;
  state_->setSnapshot(*snap);
  const auto c = map_->counts();
  const auto& m = snap->memory;
  const int g = map_->group() < snap->n_kv_groups() ? map_->group() : 0;
  const int total = g == 0 ? m.blocks_total : snap->kv_groups[static_cast<size_t>(g)].blocks_total;
  QString text = tr("<b>%1</b>×%2 · used <b>%3</b> · shared %4 · cached %5 · free %6")
                     .arg(total)
                     .arg(snap->block_size)
                     .arg(c.used)
                     .arg(c.shared)
                     .arg(c.cached)
                     .arg(c.free);
  if (g == 0) text += tr(" · waste %1%").arg(m.waste_pct, 0, 'f', 1);
  if (c.dropped) text += tr(" · slid out %1").arg(c.dropped);
  summary_->setText(text);
  if (list_->isVisible()) refreshList(*snap);
}

void BlockMapPanel::refreshList(const Snapshot& s) {
  std::vector<SeqId> ids;
  for (const SeqSnap& q : s.seqs) ids.push_back(q.id);
  if (ids != listIds_) {
    auto make_item = [this](SeqId id) {
      auto* it = new QListWidgetItem(swatch_icon(seq_color(id)), QString());
      it->setData(Qt::UserRole, static_cast<qlonglong>(id));
      return it;
    };
    std::vector<SeqId> added;
    if (!std::is_sorted(ids.begin(), ids.end()) || !std::is_sorted(listIds_.begin(), listIds_.end())) {
      list_->clear();
      for (SeqId id : ids) list_->addItem(make_item(id)), added.push_back(id);
      rowKeys_.assign(ids.size(), RowKey{});
    } else {
      // Sequences came or went: both lists are in id order, so remove and insert only the rows
      // that changed (a rebuild relaid out and repainted the whole list on every arrival).
      size_t i = 0, j = 0;
      int row = 0;
      while (i < listIds_.size() || j < ids.size()) {
        if (j == ids.size() || (i < listIds_.size() && listIds_[i] < ids[j])) {
          delete list_->takeItem(row);
          rowKeys_.erase(rowKeys_.begin() + row);
          ++i;
        } else if (i < listIds_.size() && listIds_[i] == ids[j]) {
          ++i, ++j, ++row;
        } else {
          rowKeys_.insert(rowKeys_.begin() + row, RowKey{});
          list_->insertItem(row++, make_item(ids[j]));
          added.push_back(ids[j++]);
        }
      }
    }
    // A new row of the highlighted sequence (it may have been pruned and come back) is selected.
    for (int r = 0; r < list_->count(); ++r)
      if (list_->item(r)->data(Qt::UserRole).toLongLong() == map_->highlight() &&
          std::find(added.begin(), added.end(), map_->highlight()) != added.end())
        list_->item(r)->setSelected(true);
    listIds_ = ids;
  }
  // A row's text changes only with its state or block counts: compare those and format only the
  // rows that changed (hundreds of recently finished sequences stay listed for a while).
  rowKeys_.resize(s.seqs.size());
  const int g = map_->group();
  for (size_t i = 0; i < s.seqs.size(); ++i) {
    const SeqSnap& q = s.seqs[i];
    RowKey key{q.state, 0, 0, g};
    const auto& table = g > 0 && static_cast<size_t>(g - 1) < q.tables_after_first_group.size()
                            ? q.tables_after_first_group[static_cast<size_t>(g - 1)]
                            : q.block_table;
    for (BlockId b : table) (b == kNoBlock ? key.dropped : key.live)++;
    if (rowKeys_[i] == key) continue;
    rowKeys_[i] = key;
    QString t = tr("%1 · %2 · %3 blk").arg(QString::fromStdString(q.label)).arg(short_state(q.state)).arg(key.live);
    if (key.dropped) t += tr(" +%1 out").arg(key.dropped);
    QListWidgetItem* it = list_->item(static_cast<int>(i));
    if (it->text() != t) it->setText(t);
  }
}

// ---------------------------------------------------------------- legend

BlockLegend::BlockLegend(QWidget* parent) : QWidget(parent) {
  // The height follows the width (items wrap); it is set in resizeEvent rather than through
  // height-for-width, which box layouts inside docks honour only partly.
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  setToolTip(tr("How to read the block map"));
  setFixedHeight(layoutItems(600, false));
}

QSize BlockLegend::sizeHint() const { return QSize(600, height()); }
int BlockLegend::heightForWidth(int w) const { return const_cast<BlockLegend*>(this)->layoutItems(w, false); }

void BlockLegend::resizeEvent(QResizeEvent*) {
  const int h = layoutItems(width(), false);
  if (h != height()) setFixedHeight(h);
}

void BlockLegend::paintEvent(QPaintEvent*) { layoutItems(width(), true); }

int BlockLegend::layoutItems(int width, bool paint) {
  const MapColors mc = map_colors(is_dark(palette().color(QPalette::Window)));
  const QColor base = palette().color(QPalette::Base);
  const QFontMetrics fm(font());
  const int sw = 14, lineH = std::max(sw, fm.height()) + 4;
  std::unique_ptr<QPainter> p;
  if (paint) {
    p = std::make_unique<QPainter>(this);
    p->setRenderHint(QPainter::Antialiasing, false);
  }
  int x = 0, y = 2;
  const QStringList names = {tr("used (by sequence)"),
                             tr("partly filled"),
                             tr("shared (ref>1)"),
                             tr("cached, evictable"),
                             tr("attention sink"),
                             tr("out of window"),
                             tr("free")};
  for (int i = 0; i < names.size(); ++i) {
    const int w = sw + 4 + fm.horizontalAdvance(names[i]) + 14;
    if (x + w > width && x > 0) {
      x = 0;
      y += lineH;
    }
    if (p) {
      const QRect r(x, y + (lineH - 4 - sw) / 2, sw, sw);
      const QColor c = seq_color(1);
      switch (i) {
        case 0:
          p->fillRect(r, c);
          break;
        case 1:
          p->fillRect(
              r, QColor::fromRgbF(c.redF() * 0.35f + base.redF() * 0.65f, c.greenF() * 0.35f + base.greenF() * 0.65f,
                                  c.blueF() * 0.35f + base.blueF() * 0.65f));
          p->fillRect(QRect(r.left(), r.top(), r.width() / 2, r.height()), c);
          break;
        case 2:
          p->fillRect(r, seq_color(2));
          p->setPen(QPen(mc.sharedRing, 2));
          p->drawRect(r.adjusted(1, 1, -1, -1));
          break;
        case 3:
          p->fillRect(r, mc.cached);
          p->fillRect(r, QBrush(mc.cachedHatch, Qt::BDiagPattern));
          break;
        case 4:
          p->fillRect(r, seq_color(3));
          p->setPen(Qt::NoPen);
          p->setBrush(mc.sink);
          p->drawPolygon(QPolygon({r.topLeft(), r.topLeft() + QPoint(7, 0), r.topLeft() + QPoint(0, 7)}));
          p->setBrush(Qt::NoBrush);
          break;
        case 5:
          p->fillRect(r, mc.free);
          p->setPen(QPen(mc.dropped, 1.6));
          p->drawLine(r.topLeft() + QPoint(2, 2), r.bottomRight() - QPoint(2, 2));
          p->drawLine(r.topRight() + QPoint(-2, 2), r.bottomLeft() + QPoint(2, -2));
          break;
        case 6:
          p->fillRect(r, mc.free);
          p->setPen(mc.freeBorder);
          p->drawRect(r.adjusted(0, 0, -1, -1));
          break;
      }
      p->setPen(palette().color(QPalette::WindowText));
      p->drawText(QRect(x + sw + 4, y, w, lineH - 4), Qt::AlignVCenter | Qt::AlignLeft, names[i]);
    }
    x += w;
  }
  return y + lineH;
}

}  // namespace kvscope::ui
