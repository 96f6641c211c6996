#pragma once
// "Look here": a coloured rounded frame drawn over a widget for a few seconds. It is a child
// overlay (transparent for the mouse) rather than a style sheet or a graphics effect, so the
// widget's own look, layout and children stay untouched and the frame follows its resizes.
#include <QPointer>
#include <QWidget>

class QTimer;

namespace kvscope::ui {

class HighlightFrame : public QWidget {
  Q_OBJECT
 public:
  static constexpr int kDefaultMs = 4000;
  // Frames `target` for `ms` milliseconds (replacing a frame it already has); returns the frame.
  static HighlightFrame* flash(QWidget* target, int ms = kDefaultMs);
  // The frame currently over `target`, or null.
  static HighlightFrame* on(const QWidget* target);

 protected:
  void paintEvent(QPaintEvent*) override;
  bool eventFilter(QObject* o, QEvent* e) override;

 private:
  explicit HighlightFrame(QWidget* target);
  QTimer* timer_;
};

}  // namespace kvscope::ui
