#pragma once
// Serve > Settings…: where the window's server listens and whether it needs a key. Problems
// (a port out of range, a host that is not an address) show inline and keep OK disabled; a host
// other than loopback is allowed but says that other machines can then reach the engine.
#include <QDialog>

#include "serving/serve_controller.h"

class QLabel;
class QLineEdit;
class QSpinBox;
class QDialogButtonBox;

namespace kvscope::ui {

class ServeDialog : public QDialog {
  Q_OBJECT
 public:
  explicit ServeDialog(const ServeSettings& s, QWidget* parent = nullptr);
  ServeSettings settings() const;
  QLineEdit* hostEdit() const { return host_; }
  QSpinBox* portBox() const { return port_; }
  QLabel* note() const { return note_; }
  bool acceptable() const;  // OK is enabled

 private:
  void check();
  QLineEdit *host_, *apiKey_;
  QSpinBox* port_;
  QLabel* note_;
  QDialogButtonBox* buttons_;
};

}  // namespace kvscope::ui
