#pragma once
// Where a panel that builds engines of its own (Compare, No KV cache) reads the workbench's
// current engine settings: the Settings panel implements it, the panels take this interface.
#include <QString>
#include <optional>

#include "engine/engine_config.h"
#include "model/model_config.h"

namespace kvscope::ui {

class EngineSettingsSource {
 public:
  virtual ~EngineSettingsSource() = default;
  // The validated config, or nullopt with the reason (the first problem) in *why.
  virtual std::optional<EngineConfig> config(QString* why = nullptr) const = 0;
  virtual QString modelPath() const = 0;
  virtual const ModelConfig& modelConfig() const = 0;  // the loaded model's
};

}  // namespace kvscope::ui
