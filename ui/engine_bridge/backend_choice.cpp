#include "engine_bridge/backend_choice.h"

#include <string>

namespace kvscope::ui {

QString backend_choice_key(BackendChoice c) { return QString::fromLatin1(backend_kind_name(c)); }

std::optional<BackendChoice> parse_backend_choice(const QString& key) {
  return parse_backend_kind(key.trimmed().toStdString());
}

bool cuda_usable(QString* why) {
  std::string reason;
  const bool usable = cuda_backend_usable(&reason);
  if (why) *why = QString::fromStdString(reason);
  return usable;
}

}  // namespace kvscope::ui
