#include "backend_choice.h"

#include <QObject>
#include <mutex>
#include <stdexcept>

#include "cpu/cpu_backend.h"
#ifdef KVSCOPE_WITH_CUDA
#include "cuda_backend.h"
#endif

namespace kvscope::ui {

QString backend_choice_key(BackendChoice c) {
  switch (c) {
    case BackendChoice::Auto: return QStringLiteral("auto");
    case BackendChoice::Cpu: return QStringLiteral("cpu");
    case BackendChoice::Cuda: return QStringLiteral("cuda");
  }
  return QStringLiteral("auto");
}

std::optional<BackendChoice> parse_backend_choice(const QString& key) {
  const QString k = key.trimmed().toLower();
  if (k == QLatin1String("auto")) return BackendChoice::Auto;
  if (k == QLatin1String("cpu")) return BackendChoice::Cpu;
  if (k == QLatin1String("cuda")) return BackendChoice::Cuda;
  return std::nullopt;
}

bool cuda_usable(QString* why) {
  static std::once_flag once;
  static bool usable = false;
  static QString reason;
  std::call_once(once, [] {
#ifdef KVSCOPE_WITH_CUDA
    std::string w;
    usable = cuda_device_available(&w);
    if (!usable) reason = QObject::tr("no usable CUDA device (%1)").arg(QString::fromStdString(w));
#else
    reason = QObject::tr("this build has no CUDA backend (configured without CUDA or without nvcc)");
#endif
  });
  if (why) *why = reason;
  return usable;
}

std::unique_ptr<Backend> make_backend_for(BackendChoice c, std::shared_ptr<const Model> model, int cpuThreads) {
  QString why;
  const bool cuda = c != BackendChoice::Cpu && cuda_usable(&why);
  if (c == BackendChoice::Cuda && !cuda) throw std::runtime_error(QObject::tr("CUDA backend: %1").arg(why).toStdString());
#ifdef KVSCOPE_WITH_CUDA
  if (cuda) return make_cuda_backend(model, 0, 0.9);
#endif
  return std::make_unique<CpuBackend>(model, cpuThreads);
}

}  // namespace kvscope::ui
