#pragma once
// Compare side by side: the same scenario on two engine configurations, each on its own worker
// thread (two real engines, not a simulation). Configuration A is the Settings panel's; B is A
// with the changes chosen here. Block maps and memory plots sit side by side (the plots share
// their time axis) above a summary table: peak KV MiB, waste %, prefix hit %, TTFT, tokens/s,
// and what token eviction did (tokens evicted, holes, freed blocks, compactions).
// With "quality run" ticked, each side then scores the same text (teacher-forced, on its own
// worker thread, with progress) and the table adds perplexity, and KL / top-1 agreement of B's
// next-token distributions against A's.
#include <QPointer>
#include <QWidget>
#include <array>
#include <memory>
#include <optional>

#include "engine_bridge/config_edit.h"
#include "engine_bridge/engine_host.h"
#include "engine_bridge/engine_settings_source.h"
#include "engine_bridge/workload_source.h"
#include "widgets/kv_dtype_tooltips.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QThread;

namespace kvscope::ui {

class BlockMapPanel;
class MemoryPanel;

class ComparePanel : public QWidget {
  Q_OBJECT
 public:
  // Configuration A is what `settings` (the Settings panel) holds.
  explicit ComparePanel(const EngineSettingsSource* settings, QWidget* parent = nullptr);
  ~ComparePanel() override;
  // Starts both engines on `scenario` (built-in name or file). False with *why if it cannot.
  bool start(const QString& scenario, QString* why = nullptr);
  void shutdown();
  bool finished() const;
  QTableWidget* table() const { return table_; }
  QComboBox* blockSizeB() const { return bBlock_; }
  QComboBox* dtypeB() const { return bDtype_; }
  QCheckBox* prefixB() const { return bPrefix_; }
  QCheckBox* learnedSinksB() const { return bLearned_; }
  QLineEdit* windowB() const { return bWindow_; }
  QComboBox* allocatorB() const { return bAlloc_; }
  QLineEdit* sinksB() const { return bSinks_; }
  QLineEdit* poolB() const { return bPool_; }
  QLineEdit* evictB() const { return bEvict_; }  // B's token eviction: a `--evict` spec, "off", or empty = A's
  QLabel* statusLabel() const { return status_; }
  // Presets B (not started): the KV dtype, window and sinks of `b` (its other fields are not B's
  // to change here), and the quality run when `quality` is set.
  void presetB(const EngineConfigEdit& b, std::optional<bool> quality);
  SnapshotPtr lastSnapshot(int side) const { return sides_[static_cast<size_t>(side)].last; }
  QCheckBox* qualityRun() const { return quality_; }
  QComboBox* qualityText() const { return qualityText_; }  // editable: a path to any text file
  QSpinBox* qualityTokens() const { return qualityTokens_; }
  // A side's (0: A, 1: B) finished quality run, and B's agreement with A once both are in.
  std::optional<QualityResult> quality(int side) const { return sides_[static_cast<size_t>(side)].quality; }
  std::optional<LogitsAgreement> agreement() const { return agreement_; }
  // The loaded model's KV shape and block size: B's KV dtype list shows what each dtype costs
  // per token (a packed 4/2-bit dtype's cost depends on the block size).
  void setKvShape(const KvShape& shape, int blockSize);
  void setStepDelay(int ms);    // slow motion for both engines
  int progressPercent() const;  // of the slower side

 private:
  struct Side {
    std::unique_ptr<EngineHost> host;
    BlockMapPanel* map = nullptr;
    MemoryPanel* memory = nullptr;
    QLabel* title = nullptr;
    EngineConfig cfg;
    bool loaded = false;
    int done = 0, total = 0;
    double peakUsedBytes = 0, peakWaste = 0, ttftSum = 0, peakExtFrag = 0;
    int peakRunning = 0;
    int ttftN = 0, generated = 0;
    SnapshotPtr last;
    // Quality run: started when this side's scenario is done.
    bool qualityWanted = false, qualityStarted = false;
    quint64 qualityTag = 0;
    int qualityDone = 0, qualityTotal = 0;
    std::optional<QualityResult> quality;
  };
  void resetSide(Side& s, const EngineConfig& cfg, const QString& name);
  void maybeRunScenario();
  void maybeStartQuality(Side& s);
  void maybeCompareQuality();
  QString qualityCell(const Side& s) const;
  void refreshTable();
  std::optional<EngineConfig> configB(const EngineConfig& a, QString* why) const;

  const EngineSettingsSource* settings_;
  QComboBox *scenario_, *bBlock_, *bDtype_, *bAlloc_;
  QCheckBox* bPrefix_;
  QCheckBox* bLearned_;  // B without gpt-oss's learned sink logits
  QLineEdit *bWindow_, *bSinks_, *bPool_, *bEvict_;
  QPushButton* run_;
  QLabel* status_;
  QTableWidget* table_;
  std::array<Side, 2> sides_;
  std::optional<Scenario> pending_;
  int stepDelayMs_ = 0;
  QCheckBox* quality_;
  QComboBox* qualityText_;
  QSpinBox* qualityTokens_;
  QString qualityBody_;  // the text both sides score
  std::optional<LogitsAgreement> agreement_;
  QString agreementError_;
  QPointer<QThread> agreementThread_;  // compares the two logits sets off the UI thread
};

}  // namespace kvscope::ui
