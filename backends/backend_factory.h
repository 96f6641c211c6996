#pragma once
// The one place a compute backend is chosen and built, for the CLI and the window alike:
// CPU, CUDA, or Auto (CUDA when this build has it and a device answers, else the CPU).
// Lives above core and cuda/ because core cannot link the CUDA library.
#include <memory>
#include <optional>
#include <string>

#include "engine/backend.h"
#include "model/model.h"

namespace kvscope {

enum class BackendKind { Auto, Cpu, Cuda };

const char* backend_kind_name(BackendKind k);                         // "auto", "cpu", "cuda"
std::optional<BackendKind> parse_backend_kind(const std::string& s);  // the names above, any case

// Whether the CUDA backend can run here; *why gets the reason when not. Probed once per
// process (probing a device is slow), then remembered.
bool cuda_backend_usable(std::string* why = nullptr);

// Auto falls back to the CPU; Cuda throws std::runtime_error with the reason when
// cuda_backend_usable() is false. cpu_threads: 0 = all cores.
std::unique_ptr<Backend> make_backend(BackendKind kind, std::shared_ptr<const Model> model, int cpu_threads);

}  // namespace kvscope
