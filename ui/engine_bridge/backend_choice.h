#pragma once
// Which compute backend the window's engine runs on: the `--backend` choice of kvscope-cli,
// built by the one backend factory (backends/backend_factory.h). Here only what the widgets need
// on top: the choice's settings key and the CUDA reason as QString. CUDA is refused with the
// reason (not built with CUDA, no device) instead of failing when the engine is built.
#include <QString>
#include <optional>

#include "backend_factory.h"

namespace kvscope::ui {

using BackendChoice = kvscope::BackendKind;

QString backend_choice_key(BackendChoice c);  // "auto", "cpu", "cuda"
std::optional<BackendChoice> parse_backend_choice(const QString& key);

// cuda_backend_usable() with its reason as a QString.
bool cuda_usable(QString* why = nullptr);

}  // namespace kvscope::ui
