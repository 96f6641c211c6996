#pragma once
// KV memory calculator: the core planner (kv/kv_planner.h) behind a form, with the formula
// shown and the problem statement's example preloaded (a 70B model at 128K context). Every
// result is computed twice, with the real grouped-query KV heads and with every query head
// counted as a KV head (the statement's formula), so the difference GQA makes is visible.
#include <QWidget>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;
class QTableWidget;

namespace kvscope::ui {

class PlannerPanel : public QWidget {
  Q_OBJECT
 public:
  explicit PlannerPanel(QWidget* parent = nullptr);
  QString resultText() const;
  QComboBox* presetBox() const { return preset_; }
  QLineEdit* contextEdit() const { return context_; }

 private:
  void recompute();

  QComboBox *preset_, *weights_, *kvDtype_;
  QLineEdit *context_, *window_, *prefix_;
  QSpinBox *batch_, *sinks_, *gpuGib_;
  QLabel *formula_, *message_;
  QTableWidget* table_;
};

}  // namespace kvscope::ui
