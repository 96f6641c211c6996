#include "serving/serve_menu.h"

#include <QAction>
#include <QLabel>
#include <QMenu>
#include <QSignalBlocker>
#include <QTimer>

#include "serving/serve_controller.h"
#include "serving/serve_dialog.h"

namespace kvscope::ui {

ServeMenu::ServeMenu(QWidget* window, ServeController* serve)
    : QObject(window),
      window_(window),
      serve_(serve),
      menu_(new QMenu(tr("&Serve"), window)),
      label_(new QLabel),
      tick_(new QTimer(this)) {
  toggle_ = menu_->addAction(tr("Serve this engine over &HTTP (OpenAI API)"));
  toggle_->setObjectName(QStringLiteral("serveToggle"));
  toggle_->setCheckable(true);
  toggle_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));
  menu_->addAction(tr("&Settings…"), this, [this] {
    ServeDialog d(ServeSettings::load(), window_);
    if (d.exec() != QDialog::Accepted) return;
    d.settings().save();
    if (serve_->serving()) serve_->start(d.settings());  // a restart on the new address
  });
  connect(toggle_, &QAction::toggled, this, [this](bool on) {
    if (on == serve_->serving()) return;
    if (on)
      serve_->start(ServeSettings::load());  // on failure servingChanged never says on
    else
      serve_->stop();
    const QSignalBlocker b(toggle_);
    toggle_->setChecked(serve_->serving());
  });
  connect(serve_, &ServeController::servingChanged, this, [this](bool on, const QString&) {
    const QSignalBlocker b(toggle_);
    toggle_->setChecked(on);
    refreshLabel();
    if (on)
      tick_->start();
    else
      tick_->stop();
  });
  label_->setObjectName(QStringLiteral("serveLabel"));
  label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  label_->hide();
  tick_->setInterval(1000);  // the request count, once a second
  connect(tick_, &QTimer::timeout, this, &ServeMenu::refreshLabel);
}

void ServeMenu::refreshLabel() {
  if (!serve_->serving()) {
    label_->hide();
    return;
  }
  const auto m = serve_->metrics();
  uint64_t done = m.requests_cancelled + m.requests_rejected;
  for (const auto& [reason, n] : m.finished_by_reason) done += n;
  label_->setText(tr("serving %1 · %2 running").arg(serve_->url()).arg(m.active_requests));
  label_->setToolTip(
      tr("OpenAI-compatible API at %1/v1, metrics at %1/metrics (Serve menu); %2 requests answered so far")
          .arg(serve_->url())
          .arg(done));
  label_->show();
}

}  // namespace kvscope::ui
