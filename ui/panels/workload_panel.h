#pragma once
// The workload runner: pick a built-in scenario or a JSON file, run it with a progress bar, and
// pause / single-step / resume the engine (with an optional slow-motion delay per step).
#include <QWidget>

#include "engine_bridge/engine_host.h"
#include "panels/snapshot_view.h"
#include "engine_bridge/workload_source.h"

class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSlider;

class QTableWidget;
class QTimer;
namespace kvscope::ui {

class WorkloadPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  explicit WorkloadPanel(EngineHost* host, QWidget* parent = nullptr);
  void resetForEngine(const ModelInfo& info) override;  // its context length and vocabulary size
  // Runs a built-in scenario by name or a scenario file by path; false (and an error) if unknown.
  bool run(const QString& nameOrPath);
  std::optional<Scenario> currentScenario(QString* error = nullptr) const;
  QComboBox* scenarioBox() const { return box_; }
  QProgressBar* progress() const { return progress_; }
  int done() const { return done_; }
  int total() const { return total_; }
  void setStepDelay(int ms);
  // The requests table follows the snapshots (refreshed a few times a second while visible).
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events) override;
  QTableWidget* requestsTable() const { return table_; }

 protected:
  void showEvent(QShowEvent* e) override;

 signals:
  void scenarioStarted(const kvscope::ui::Scenario& s);

 private:
  void refreshList();
  void updateDescription();

  EngineHost* host_;
  QComboBox* box_;
  QLabel* desc_;
  QPushButton *run_, *pause_, *step_, *stop_;
  QSlider* delay_;
  QLabel* delayLabel_;
  QProgressBar* progress_;
  QTableWidget* table_;
  QTimer* tableTimer_;
  SnapshotPtr pending_;
  void refreshTable();
  int done_ = 0, total_ = 0;
};

}  // namespace kvscope::ui
