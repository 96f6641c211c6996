#include "backend_factory.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <stdexcept>

#include "cpu/cpu_backend.h"
#ifdef KVSCOPE_WITH_CUDA
#include "cuda_backend.h"
#endif

namespace kvscope {

const char* backend_kind_name(BackendKind k) {
  switch (k) {
    case BackendKind::Auto:
      return "auto";
    case BackendKind::Cpu:
      return "cpu";
    case BackendKind::Cuda:
      return "cuda";
  }
  return "auto";
}

std::optional<BackendKind> parse_backend_kind(const std::string& s) {
  std::string k = s;
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (BackendKind b : {BackendKind::Auto, BackendKind::Cpu, BackendKind::Cuda})
    if (k == backend_kind_name(b)) return b;
  return std::nullopt;
}

bool cuda_backend_usable(std::string* why) {
  static std::once_flag once;
  static bool usable = false;
  static std::string reason;
  std::call_once(once, [] {
#ifdef KVSCOPE_WITH_CUDA
    std::string w;
    usable = cuda_device_available(&w);
    if (!usable) reason = "no usable CUDA device (" + w + ")";
#else
    reason = "this build has no CUDA backend (configured without CUDA or without nvcc)";
#endif
  });
  if (why) *why = reason;
  return usable;
}

std::unique_ptr<Backend> make_backend(BackendKind kind, std::shared_ptr<const Model> model, int cpu_threads) {
  std::string why;
  const bool cuda = kind != BackendKind::Cpu && cuda_backend_usable(&why);
  if (kind == BackendKind::Cuda && !cuda) throw std::runtime_error("CUDA backend: " + why);
#ifdef KVSCOPE_WITH_CUDA
  if (cuda) return make_cuda_backend(model, 0, 0.9);
#endif
  return std::make_unique<CpuBackend>(model, cpu_threads);
}

}  // namespace kvscope
