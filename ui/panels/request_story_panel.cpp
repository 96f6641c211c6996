#include "panels/request_story_panel.h"

#include <QDockWidget>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace kvscope::ui {

namespace {
QColor kind_colour(const QString& kind) {
  if (kind == QLatin1String("miss")) return QColor(0xb7, 0x1c, 0x1c);
  if (kind == QLatin1String("preemption")) return QColor(0xc4, 0x5c, 0x00);
  if (kind == QLatin1String("wait")) return QColor(0x6a, 0x4c, 0x93);
  if (kind == QLatin1String("reasoning")) return QColor(0x00, 0x79, 0x6b);  // the thinking's tokens and blocks
  return QColor();
}
}  // namespace

RequestStoryPanel::RequestStoryPanel(EngineHost* host, QWidget* parent) : QWidget(parent), host_(host) {
  header_ =
      new QLabel(tr("Click a request (requests table, a block on the block map, or \"story\" under a chat turn) "
                    "to read what happened to its KV cache."));
  header_->setWordWrap(true);
  refresh_ = new QPushButton(tr("Refresh"));
  refresh_->setToolTip(tr("Ask the engine again (a running request's story grows)."));
  refresh_->setEnabled(false);
  list_ = new QListWidget;
  list_->setWordWrap(true);
  list_->setUniformItemSizes(false);
  list_->setToolTip(tr("Click a sentence to show the block map as it was at that step."));
  jump_ = new QLabel;
  jump_->setWordWrap(true);
  auto* top = new QHBoxLayout;
  top->addWidget(header_, 1);
  top->addWidget(refresh_, 0, Qt::AlignTop);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addLayout(top);
  v->addWidget(list_, 1);
  v->addWidget(jump_);
  connect(host_->worker(), &EngineThreadWorker::storyReady, this, &RequestStoryPanel::onStory);
  connect(refresh_, &QPushButton::clicked, this, [this] { showRequest(story_.id); });
  connect(list_, &QListWidget::itemClicked, this, &RequestStoryPanel::jumpTo);
  sinceRefresh_.start();
}

void RequestStoryPanel::showRequest(SeqId id) {
  if (id < 0) return;
  wanted_ = id;
  sinceRefresh_.restart();
  host_->requestStory(id);
  if (auto* dock = qobject_cast<QDockWidget*>(parentWidget())) dock->raise();
}

void RequestStoryPanel::onStory(const StoryText& t) {
  if (t.id != wanted_) return;  // an answer to an older click
  story_ = t;
  refresh_->setEnabled(true);
  list_->clear();
  jump_->clear();
  if (!t.found) {
    header_->setText(tr("Request %1 is not in the engine's story history (it keeps every live request and the "
                        "newest finished ones).")
                         .arg(t.id));
    emit storyShown(t.id);
    return;
  }
  header_->setText(tr("<b>Request %1</b> (%2)").arg(t.id).arg(t.label.toHtmlEscaped()));
  for (const StoryTextLine& l : t.lines) {
    auto* it = new QListWidgetItem(tr("step %1 · %2").arg(l.step).arg(l.text), list_);
    it->setData(Qt::UserRole, static_cast<qulonglong>(l.step));
    it->setData(Qt::UserRole + 1, l.kind);
    if (const QColor c = kind_colour(l.kind); c.isValid()) it->setForeground(c);
  }
  emit storyShown(t.id);
}

void RequestStoryPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch&) {
  if (!snap) return;
  if (history_.empty() || history_.back()->step != snap->step) history_.push_back(snap);
  while (history_.size() > kMaxSnapshots) history_.pop_front();
  // A live request's story grows: follow it a couple of times a second while shown.
  const bool live = story_.found && (story_.lines.isEmpty() || story_.lines.back().kind != QLatin1String("finish"));
  if (live && isVisible() && sinceRefresh_.elapsed() > 500) showRequest(story_.id);
}

void RequestStoryPanel::resetForEngine(const ModelInfo&) {
  history_.clear();
  jump_->clear();
}

SnapshotPtr RequestStoryPanel::snapshotAt(quint64 step) const {
  SnapshotPtr best;
  for (const SnapshotPtr& s : history_)
    if (s->step <= step) best = s;
  return best ? best : (history_.empty() ? nullptr : history_.front());
}

void RequestStoryPanel::jumpTo(QListWidgetItem* item) {
  if (!item) return;
  const quint64 step = item->data(Qt::UserRole).toULongLong();
  const SnapshotPtr snap = snapshotAt(step);
  if (!snap) {
    jump_->setText(tr("No snapshot is kept yet."));
    return;
  }
  jump_->setText(snap->step == step
                     ? tr("Block map: step %1.").arg(step)
                     : tr("Block map: step %1, the nearest kept snapshot to step %2 (the window keeps the "
                          "last %3 it received).")
                           .arg(snap->step)
                           .arg(step)
                           .arg(kMaxSnapshots));
  emit jumpRequested(snap);
}

}  // namespace kvscope::ui
