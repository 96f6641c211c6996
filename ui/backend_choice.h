#pragma once
// Which compute backend the window's engine runs on: CPU, CUDA, or Auto (CUDA when this build has
// it and a device answers, else CPU) — the `--backend` choice of kvscope-cli. CUDA is refused
// with the reason (not built with CUDA, no device) instead of failing when the engine is built.
#include <QString>
#include <memory>
#include <optional>

#include "engine/backend.h"
#include "model/model.h"

namespace kvscope::ui {

enum class BackendChoice { Auto, Cpu, Cuda };

QString backend_choice_key(BackendChoice c);                        // "auto", "cpu", "cuda"
std::optional<BackendChoice> parse_backend_choice(const QString& key);

// Whether the CUDA backend can run here; *why gets the reason when not. Asked once per process
// (probing a device is slow), then remembered.
bool cuda_usable(QString* why = nullptr);

// The backend for `c`: Auto falls back to the CPU; Cuda throws std::runtime_error with the
// reason when cuda_usable() is false.
std::unique_ptr<Backend> make_backend_for(BackendChoice c, std::shared_ptr<const Model> model, int cpuThreads);

}  // namespace kvscope::ui
