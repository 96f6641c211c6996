#pragma once
// Set-up shared by the GUI suites: a readable log under the offscreen platform and settings
// isolated from the user's (and from the other suites', which may run at the same time).
#include <QCoreApplication>
#include <QSettings>
#include <QString>

#include "test_support.h"

namespace kvscope::test {

namespace detail {
inline QtMessageHandler g_previous_handler = nullptr;
// The offscreen platform warns about every window feature it lacks; keep the log readable.
inline void quiet_offscreen(QtMsgType type, const QMessageLogContext& ctx, const QString& msg) {
  if (msg.startsWith(QStringLiteral("This plugin does not support"))) return;
  g_previous_handler(type, ctx, msg);
}
}  // namespace detail

// Call from initTestCase(): quiet log, stories260K required, QSettings in a scratch INI file
// of this suite's own, cleared.
inline void start_gui_suite(const char* suite) {
  detail::g_previous_handler = qInstallMessageHandler(detail::quiet_offscreen);
  KVSCOPE_REQUIRE_FILE(models_dir() / "stories260K.gguf");
  QSettings::setDefaultFormat(QSettings::IniFormat);
  QSettings::setPath(QSettings::IniFormat, QSettings::UserScope,
                     QString::fromStdString((tmp_dir() / (std::string("gui-settings-") + suite)).string()));
  QCoreApplication::setOrganizationName(QStringLiteral("kvscope-test"));
  QCoreApplication::setApplicationName(QString::fromLatin1(suite));
  QSettings().clear();
}

}  // namespace kvscope::test
