#pragma once
// Engine and sampling settings. Each field refuses malformed input as it is typed (validators);
// combinations that cannot work (a window smaller than a block, sinks without a window...) are
// explained inline in red and keep "Apply" disabled, so a bad value never reaches the engine.
// Applying asks the worker to rebuild the engine (and reload the model if its path changed).
#include <QWidget>
#include <map>
#include <optional>
#include <vector>

#include "engine_bridge/backend_choice.h"
#include "engine_bridge/config_edit.h"
#include "engine_bridge/engine_settings_source.h"
#include "engine_bridge/sampling_defaults.h"
#include "widgets/kv_dtype_tooltips.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QToolButton;

namespace kvscope::ui {

// The engine settings a fresh install starts with.
EngineConfig default_gui_config();
// CPU threads of a fresh install: every core (docs/engine.md, "Defaults: threads and sampling":
// measured on 2 cores).
int default_gui_threads();

class SettingsPanel : public QWidget, public EngineSettingsSource {
  Q_OBJECT
 public:
  explicit SettingsPanel(QWidget* parent = nullptr);

  QString modelPath() const override;
  void setModelPath(const QString& path);
  void showConfig(const EngineConfig& cfg);  // what the running engine actually uses
  // The validated config, or nullopt with the reason (the first problem) in *why.
  std::optional<EngineConfig> config(QString* why = nullptr) const override;
  // One problem with the settings as entered: `field` is the EngineConfig member it is about
  // ("block_size", "window", ...; "model" for the model path), shown beside that field.
  struct Problem {
    QString field;
    QString message;
  };
  std::vector<Problem> problems() const;
  QString fieldNote(const QString& field) const;  // the message shown beside a field ("" if none)
  SamplingDefaults samplingDefaults() const;
  // The compute backend. Choosing CUDA where it cannot run is refused as it is chosen: the box
  // goes back to the previous choice and backendNote() says why.
  BackendChoice backendChoice() const;
  bool setBackendChoice(BackendChoice c);  // false (and the reason shown) when refused
  QString backendNote() const;
  QString validationMessage() const;
  QStringList recentModels() const;
  void addRecentModel(const QString& path);
  // The loaded model: the settings are validated against its config (core validate()), and
  // the KV dtype list shows what each dtype costs per token with its KV shape.
  void setModel(const ModelConfig& model, const KvShape& shape);
  const ModelConfig& modelConfig() const override { return modelConfig_; }
  // Shows a typed settings change in the fields (what is not set stays as entered) and
  // revalidates; the panel's own rules still apply (config() says what they refuse).
  void applyEdit(const EngineConfigEdit& edit);
  // Command-line style override (parse_config_override's keys), read once into a typed edit
  // and shown with applyEdit. False for an unknown key or a value it cannot read.
  bool setOverride(const QString& key, const QString& value);
  void load();  // from QSettings
  void save() const;

  // Handles for tests and the screenshot driver.
  QLineEdit* poolEdit() const { return pool_; }
  QComboBox* poolUnit() const { return poolUnit_; }
  QComboBox* blockSizeBox() const { return blockSize_; }
  QLineEdit* windowEdit() const { return window_; }
  QLineEdit* sinksEdit() const { return sinks_; }
  QLineEdit* evictEdit() const { return evict_; }  // token eviction: a `--evict` spec, empty = off
  QPushButton* applyButton() const { return apply_; }
  QComboBox* dtypeBox() const { return dtype_; }
  QComboBox* stateDtypeBox() const { return stateDtype_; }            // a hybrid model's recurrent state
  QComboBox* checkpointsBox() const { return checkpoints_; }          // its prefix-cache checkpoints' policy (editable)
  QLineEdit* checkpointMemoryEdit() const { return checkpointMiB_; }  // and their budget in MiB
  QCheckBox* prefixBox() const { return prefix_; }
  QCheckBox* baselineBox() const { return baseline_; }
  QComboBox* baselineReserveBox() const { return reserve_; }      // what the baseline reserves per request
  QLineEdit* baselineGuessEdit() const { return reserveGuess_; }  // the fixed guess, in tokens
  QComboBox* backendBox() const { return backend_; }
  QSpinBox* threadsBox() const { return threads_; }  // CPU backend threads (EngineConfig::threads)
  QDoubleSpinBox* repetitionPenaltyBox() const { return repPen_; }

 signals:
  void applyRequested(const kvscope::EngineConfig& cfg, const QString& modelPath);
  void samplingDefaultsChanged(const kvscope::ui::SamplingDefaults& d);
  void browseRequested();

 private:
  void revalidate();
  // Reads the widgets into *cfg, adding a problem for each field that does not parse; then
  // adds the problems of the config rules.
  void read(EngineConfig* cfg, std::vector<Problem>* problems) const;
  // `field` with a red note under it that shows the problems of the EngineConfig members `names`.
  QWidget* withNote(QWidget* field, std::initializer_list<const char*> names);
  QWidget* withNote(QLayout* field, std::initializer_list<const char*> names);
  std::map<QString, QLabel*> notes_;  // EngineConfig member -> the note beside its field
  void rebuildRecentMenu();
  void updateDtypeTooltips();
  KvShape shape_;
  ModelConfig modelConfig_;  // the loaded model's (default before one is loaded)

  QLineEdit* model_;
  QToolButton* recent_;
  QComboBox *blockSize_, *poolUnit_, *dtype_, *stateDtype_, *checkpoints_;
  QLineEdit *pool_, *window_, *sinks_, *evict_, *maxLen_, *checkpointMiB_;
  QCheckBox* prefix_;
  QCheckBox* baseline_;
  QComboBox* reserve_;
  QLineEdit* reserveGuess_;
  QComboBox* backend_;
  QLabel* backendNote_;
  int backendIndex_ = 0;  // the last accepted choice
  QSpinBox *maxRunning_, *maxBatched_, *threads_;
  QDoubleSpinBox *temp_, *topP_, *repPen_;
  QSpinBox *topK_, *maxTok_, *seed_;
  QLabel* message_;
  QPushButton* apply_;
};

}  // namespace kvscope::ui
