#include "serving/serve_dialog.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

namespace kvscope::ui {

ServeDialog::ServeDialog(const ServeSettings& s, QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Serve settings"));
  host_ = new QLineEdit(s.host);
  host_->setObjectName(QStringLiteral("serveHost"));
  port_ = new QSpinBox;
  port_->setObjectName(QStringLiteral("servePort"));
  port_->setRange(0, 65535);
  port_->setValue(s.port);
  port_->setSpecialValueText(tr("any free port"));
  apiKey_ = new QLineEdit(s.apiKey);
  apiKey_->setEchoMode(QLineEdit::PasswordEchoOnEdit);
  apiKey_->setPlaceholderText(tr("none: any client may use it"));
  note_ = new QLabel;
  note_->setObjectName(QStringLiteral("serveNote"));
  note_->setWordWrap(true);
  buttons_ = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  connect(buttons_, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons_, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* form = new QFormLayout;
  form->addRow(tr("Host"), host_);
  form->addRow(tr("Port"), port_);
  form->addRow(tr("API key"), apiKey_);
  auto* about =
      new QLabel(tr("The OpenAI-compatible API (/v1/completions, /v1/chat/completions, /v1/models), "
                    "/metrics with vLLM's names and /health, on the engine this window shows: "
                    "its requests appear in the block map beside the chat's."));
  about->setWordWrap(true);
  auto* v = new QVBoxLayout(this);
  v->addWidget(about);
  v->addLayout(form);
  v->addWidget(note_);
  v->addWidget(buttons_);
  connect(host_, &QLineEdit::textChanged, this, &ServeDialog::check);
  connect(port_, &QSpinBox::valueChanged, this, &ServeDialog::check);
  check();
}

ServeSettings ServeDialog::settings() const {
  ServeSettings s;
  s.host = host_->text().trimmed();
  s.port = port_->value();
  s.apiKey = apiKey_->text();
  return s;
}

bool ServeDialog::acceptable() const { return buttons_->button(QDialogButtonBox::Ok)->isEnabled(); }

void ServeDialog::check() {
  const ServeSettings s = settings();
  const QString problem = s.problem();
  buttons_->button(QDialogButtonBox::Ok)->setEnabled(problem.isEmpty());
  if (!problem.isEmpty())
    note_->setText(problem);
  else if (!s.loopback())
    note_->setText(
        tr("Other machines on the network can reach this engine at %1:%2. Set an API key unless that is what you want.")
            .arg(s.host)
            .arg(s.port));
  else
    note_->setText(tr("Only programs on this machine can reach it."));
}

}  // namespace kvscope::ui
