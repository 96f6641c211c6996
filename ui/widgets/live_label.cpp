#include "widgets/live_label.h"

#include <QAbstractTextDocumentLayout>
#include <QEvent>
#include <QPainter>

namespace kvscope::ui {

LiveLabel::LiveLabel(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
  doc_.setDocumentMargin(0);
  QTextOption opt = doc_.defaultTextOption();
  opt.setWrapMode(QTextOption::NoWrap);
  doc_.setDefaultTextOption(opt);
  doc_.setDefaultFont(font());
}

void LiveLabel::setText(const QString& text) {
  if (text == text_) return;
  text_ = text;
  doc_.setHtml(text);
  updateElision();
  update();  // deliberately no updateGeometry(): the height never changes
}

void LiveLabel::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  updateElision();
}

void LiveLabel::updateElision() {
  const bool elided = doc_.idealWidth() > width();
  if (elided && !elided_) ownToolTip_ = toolTip();
  elided_ = elided;
  const QString tip = elided ? doc_.toPlainText() : ownToolTip_;
  if (toolTip() != tip) setToolTip(tip);
}

QSize LiveLabel::sizeHint() const { return QSize(200, fontMetrics().height() + 4); }
QSize LiveLabel::minimumSizeHint() const { return QSize(20, fontMetrics().height() + 4); }

void LiveLabel::changeEvent(QEvent* e) {
  if (e->type() == QEvent::FontChange) {
    doc_.setDefaultFont(font());
    doc_.setHtml(text_);
    updateElision();
  }
  QWidget::changeEvent(e);
}

void LiveLabel::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QString dots = QStringLiteral("…");
  const int dotsWidth = elided_ ? fontMetrics().horizontalAdvance(dots) : 0;
  if (elided_) {
    p.setPen(palette().color(QPalette::WindowText));
    p.drawText(QRect(width() - dotsWidth, 0, dotsWidth, height()), Qt::AlignLeft | Qt::AlignVCenter, dots);
  }
  p.setClipRect(rect().adjusted(0, 0, -dotsWidth, 0));
  p.translate(0, (height() - doc_.size().height()) / 2);
  QAbstractTextDocumentLayout::PaintContext ctx;
  ctx.palette = palette();
  ctx.palette.setColor(QPalette::Text, palette().color(QPalette::WindowText));
  doc_.documentLayout()->draw(&p, ctx);
}

}  // namespace kvscope::ui
