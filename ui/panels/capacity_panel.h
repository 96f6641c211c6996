#pragma once
// Capacity: "how much prefix-cache hit would I get with twice the cache, another router, a CPU
// tier?" for a request trace (Mooncake's or kvscope's own, serve --record), answered by
// run/capacity_study.h on a worker thread: the hit ratio against cache size on a log axis with
// the loaded engine's pool and the chosen pool per instance marked, the routers and the CPU
// tier side by side, and what one more GiB of KV buys at the chosen pool for a model geometry.
#include <QString>
#include <QWidget>
#include <atomic>
#include <memory>
#include <thread>

#include "panels/snapshot_view.h"
#include "run/capacity_study.h"

class QComboBox;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace kvscope::ui {

class CapacityPanel : public QWidget, public SnapshotView {
  Q_OBJECT
 public:
  explicit CapacityPanel(QWidget* parent = nullptr);
  ~CapacityPanel() override;  // cancels a running study and waits for its current pass
  void showSnapshot(const SnapshotPtr& snap, const EventBatch& events) override;

  // Starts a study with the form's values; false (and the reason in the status line) when the
  // form is invalid or a study is running.
  bool start();
  void cancel();
  bool running() const { return running_; }
  const CapacityStudy& study() const { return study_; }
  QString statusText() const;
  QString marginalText() const;
  QLineEdit* traceEdit() const { return trace_; }
  QComboBox* formatBox() const { return format_; }
  QSpinBox* blockSizeBox() const { return blockSize_; }
  QComboBox* geometryBox() const { return geometry_; }
  QLineEdit* poolEdit() const { return pool_; }
  QSpinBox* instancesBox() const { return instances_; }
  QLineEdit* cpuEdit() const { return cpu_; }
  QTableWidget* table() const { return table_; }
  QCustomPlot* plot() const { return plot_; }
  double currentPoolGib() const;  // the loaded engine's pool in the chosen geometry; 0 when none

 signals:
  void studyFinished(bool completed);

 private:
  bool readForm(CapacityStudyInput& in, QString* why) const;
  int64_t bytesPerToken(QString* why) const;
  void onProgress(int done, int total);
  void onDone(bool completed, const QString& error, std::shared_ptr<CapacityStudy> study);
  void showStudy();
  void setStatus(const QString& s, bool error = false);

  QLineEdit *trace_, *pool_, *cpu_;
  QComboBox *format_, *geometry_, *kvDtype_;
  QSpinBox *blockSize_, *instances_;
  QPushButton *browse_, *run_, *stop_;
  QProgressBar* progress_;
  QLabel *status_, *marginal_;
  QCustomPlot* plot_;
  QTableWidget* table_;

  SnapshotPtr snap_;
  CapacityStudy study_;
  int64_t studyBytesPerToken_ = 0;
  int64_t studyPoolTokens_ = 0;
  bool running_ = false;
  std::atomic<bool> cancel_{false};
  std::thread worker_;
};

}  // namespace kvscope::ui
