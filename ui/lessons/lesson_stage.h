#pragma once
// What a lesson needs from the workbench, and nothing more: the engine, the Settings panel's
// one apply path (a typed change, validated there), the scenario runner, Compare's side B, the
// No-KV-cache runs, the captions, and the docks to point at. The main window implements it,
// so the Lessons panel knows neither the window nor the other panels.
#include <QString>

#include "engine_bridge/config_edit.h"
#include "engine_bridge/engine_host.h"

class QDockWidget;
class QWidget;

namespace kvscope::ui {

class LessonStage {
 public:
  virtual ~LessonStage() = default;
  virtual EngineHost* host() const = 0;
  // Shows `edit` in the Settings panel; false, with the panel's reason in *why (also shown
  // beside the field there), when its rules refuse the result. Nothing is applied yet.
  virtual bool stageEngineConfig(const EngineConfigEdit& edit, QString* why) = 0;
  // The Settings panel's Apply: the one path every settings change takes.
  virtual void applyStagedEngineConfig() = 0;
  virtual bool runScenario(const QString& key) = 0;  // the Workload panel's runner
  virtual void presetCompareB(const EngineConfigEdit& b, std::optional<bool> quality) = 0;
  virtual void startNoCacheComparison() = 0;  // unless it is running already
  virtual void startLatentComparison() = 0;   // the same for the Latent KV panel
  virtual void startHybridComparison() = 0;   // and the Hybrid state panel
  virtual void clearCaptions() = 0;
  virtual QDockWidget* panelDock(const QString& objectName) const = 0;  // null if none
  virtual QWidget* centralPanel() const = 0;                            // the block map ("blockMap")
};

}  // namespace kvscope::ui
