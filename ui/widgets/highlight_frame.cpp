#include "widgets/highlight_frame.h"

#include <QEvent>
#include <QPainter>
#include <QTimer>

namespace kvscope::ui {

namespace {
const char* const kName = "lessonHighlight";
}

HighlightFrame::HighlightFrame(QWidget* target) : QWidget(target), timer_(new QTimer(this)) {
  setObjectName(QString::fromLatin1(kName));
  setAttribute(Qt::WA_TransparentForMouseEvents);
  setAttribute(Qt::WA_NoSystemBackground);
  setFocusPolicy(Qt::NoFocus);
  timer_->setSingleShot(true);
  connect(timer_, &QTimer::timeout, this, &QObject::deleteLater);
  target->installEventFilter(this);
  setGeometry(target->rect());
  raise();
  show();
}

HighlightFrame* HighlightFrame::flash(QWidget* target, int ms) {
  if (!target) return nullptr;
  HighlightFrame* f = on(target);
  if (!f) f = new HighlightFrame(target);
  f->timer_->start(ms);
  f->raise();
  return f;
}

HighlightFrame* HighlightFrame::on(const QWidget* target) {
  if (!target) return nullptr;
  return target->findChild<HighlightFrame*>(QString::fromLatin1(kName), Qt::FindDirectChildrenOnly);
}

bool HighlightFrame::eventFilter(QObject* o, QEvent* e) {
  // Follow the target's size, and stay above children it adds later.
  if (o == parent() && (e->type() == QEvent::Resize || e->type() == QEvent::ChildAdded)) {
    setGeometry(parentWidget()->rect());
    raise();
  }
  return false;
}

void HighlightFrame::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const qreal w = 3;
  p.setPen(QPen(QColor(0xf2, 0x8e, 0x2b), w));
  p.setBrush(Qt::NoBrush);
  p.drawRoundedRect(QRectF(rect()).adjusted(w / 2, w / 2, -w / 2, -w / 2), 5, 5);
}

}  // namespace kvscope::ui
