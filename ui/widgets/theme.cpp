#include "widgets/theme.h"

#include <QApplication>
#include <QEvent>
#include <QPalette>
#include <QScrollArea>
#include <QStyle>
#include <QStyleFactory>
#include <QVBoxLayout>
#include <qcustomplot.h>

namespace kvscope::ui {

void apply_theme(const QString& name) {
  static const QPalette systemPalette = QApplication::palette();
  if (name == QLatin1String("system")) {
    QApplication::setPalette(systemPalette);
    return;
  }
  QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  QPalette p;
  if (name == QLatin1String("dark")) {
    const QColor window(0x23, 0x26, 0x2b), base(0x1b, 0x1d, 0x21), text(0xe6, 0xe8, 0xeb), mid(0x3a, 0x3f, 0x47);
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::AlternateBase, window);
    p.setColor(QPalette::ToolTipBase, QColor(0x30, 0x34, 0x3b));
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::PlaceholderText, QColor(0x8a, 0x90, 0x99));
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, QColor(0x2c, 0x30, 0x36));
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, Qt::white);
    p.setColor(QPalette::Mid, mid);
    p.setColor(QPalette::Dark, QColor(0x16, 0x18, 0x1b));
    p.setColor(QPalette::Light, QColor(0x45, 0x4a, 0x53));
    p.setColor(QPalette::Highlight, QColor(0x3d, 0x7e, 0xc4));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Link, QColor(0x6c, 0xb0, 0xff));
    p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x6b, 0x70, 0x78));
    p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x6b, 0x70, 0x78));
    p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(0x6b, 0x70, 0x78));
  } else {
    const QColor window(0xf4, 0xf5, 0xf7), text(0x1f, 0x23, 0x28);
    p = QApplication::style()->standardPalette();
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, Qt::white);
    p.setColor(QPalette::AlternateBase, QColor(0xf0, 0xf2, 0xf5));
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, QColor(0xfa, 0xfb, 0xfc));
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::Highlight, QColor(0x2f, 0x6b, 0x9a));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::ToolTipBase, QColor(0xff, 0xff, 0xf2));
    p.setColor(QPalette::ToolTipText, text);
  }
  QApplication::setPalette(p);
}

void style_plot(QCustomPlot* plot, const QPalette& pal, int legendAlpha) {
  const QColor fg = pal.color(QPalette::WindowText), bg = pal.color(QPalette::Base);
  plot->setBackground(bg);
  for (QCPAxisRect* rect : plot->axisRects())
    for (QCPAxis* a : rect->axes()) {
      a->setBasePen(QPen(fg));
      a->setTickPen(QPen(fg));
      a->setSubTickPen(QPen(fg));
      a->setTickLabelColor(fg);
      a->setLabelColor(fg);
      a->grid()->setPen(QPen(QColor(fg.red(), fg.green(), fg.blue(), 40), 1, Qt::DotLine));
    }
  plot->legend->setTextColor(fg);
  plot->legend->setBrush(QColor(bg.red(), bg.green(), bg.blue(), legendAlpha));
  plot->legend->setBorderPen(QPen(QColor(fg.red(), fg.green(), fg.blue(), 60)));
  plot->replot(QCustomPlot::rpQueuedReplot);
}

namespace {
class PaletteWatcher : public QObject {
 public:
  PaletteWatcher(QWidget* w, std::function<void()> f) : QObject(w), restyle_(std::move(f)) {
    w->installEventFilter(this);
  }
  bool eventFilter(QObject* o, QEvent* e) override {
    if (e->type() == QEvent::PaletteChange) restyle_();
    return QObject::eventFilter(o, e);
  }

 private:
  std::function<void()> restyle_;
};
}  // namespace

void restyle_on_palette_change(QWidget* widget, std::function<void()> restyle) {
  new PaletteWatcher(widget, std::move(restyle));  // a child of widget: lives as long as it
}

QScrollArea* scroll_area(QWidget* content, bool wrapWidth) {
  auto* scroll = new QScrollArea;
  if (wrapWidth) scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll->setWidget(content);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  return scroll;
}

QScrollArea* fill_with_scroll_area(QWidget* panel, QWidget* content, bool wrapWidth) {
  QScrollArea* scroll = scroll_area(content, wrapWidth);
  auto* outer = new QVBoxLayout(panel);
  outer->setContentsMargins(0, 0, 0, 0);
  outer->addWidget(scroll);
  return scroll;
}

}  // namespace kvscope::ui
