#pragma once
// The Serve menu and its status-bar label: "Serve this engine over HTTP" (checkable) and
// "Settings…", kept in step with the ServeController (a failed start unchecks the action).
#include <QObject>

class QAction;
class QLabel;
class QMenu;
class QTimer;
class QWidget;

namespace kvscope::ui {

class ServeController;

class ServeMenu : public QObject {
  Q_OBJECT
 public:
  ServeMenu(QWidget* window, ServeController* serve);
  QMenu* menu() const { return menu_; }
  QAction* toggle() const { return toggle_; }     // checked while serving
  QLabel* statusLabel() const { return label_; }  // for the window's status bar

 private:
  void refreshLabel();
  QWidget* window_;
  ServeController* serve_;
  QMenu* menu_;
  QAction* toggle_;
  QLabel* label_;
  QTimer* tick_;
};

}  // namespace kvscope::ui
