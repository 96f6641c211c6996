#pragma once
// A one-line label for text that changes with every snapshot (step counters, block counts).
// QLabel::setText asks the whole window to re-layout each time; this widget only repaints
// itself, which keeps the UI thread's per-snapshot cost flat. Simple rich text (<b>) is allowed.
// Text wider than the label is cut with an ellipsis, and the whole text becomes its tooltip.
#include <QTextDocument>
#include <QWidget>

namespace kvscope::ui {

class LiveLabel : public QWidget {
  Q_OBJECT
 public:
  explicit LiveLabel(QWidget* parent = nullptr);
  void setText(const QString& text);
  QString text() const { return text_; }
  QString plainText() const { return doc_.toPlainText(); }
  bool isElided() const { return elided_; }
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;
  void changeEvent(QEvent* e) override;
  void resizeEvent(QResizeEvent* e) override;

 private:
  QString text_;
  void updateElision();
  QTextDocument doc_;  // laid out without wrapping: one line, clipped at the widget's edge
  bool elided_ = false;
  QString ownToolTip_;  // the tooltip it had before eliding replaced it
};

}  // namespace kvscope::ui
