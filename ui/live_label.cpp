#include "live_label.h"

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
  update();  // deliberately no updateGeometry(): the height never changes
}

QSize LiveLabel::sizeHint() const { return QSize(200, fontMetrics().height() + 4); }
QSize LiveLabel::minimumSizeHint() const { return QSize(20, fontMetrics().height() + 4); }

void LiveLabel::changeEvent(QEvent* e) {
  if (e->type() == QEvent::FontChange) {
    doc_.setDefaultFont(font());
    doc_.setHtml(text_);
  }
  QWidget::changeEvent(e);
}

void LiveLabel::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setClipRect(rect());
  p.translate(0, (height() - doc_.size().height()) / 2);
  QAbstractTextDocumentLayout::PaintContext ctx;
  ctx.palette = palette();
  ctx.palette.setColor(QPalette::Text, palette().color(QPalette::WindowText));
  doc_.documentLayout()->draw(&p, ctx);
}

}  // namespace kvscope::ui
