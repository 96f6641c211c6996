#pragma once
// The workbench window: the block map in the middle, every other panel in a dock (layout
// remembered with QSettings), menus, and a status bar with the KV summary and backend. It owns
// one EngineHost and fans each delivered snapshot out to the panels; panels only store the
// pointer and repaint, so the UI thread never waits on the engine.
#include <QMainWindow>
#include <QMap>
#include <QPointer>

#include "engine_host.h"

class QDockWidget;
class QLabel;
class QProgressBar;
class QToolButton;

namespace kvscope::ui {

class BlockMapPanel;
class LiveLabel;
class ChatPanel;
class CaptionsPanel;
class ComparePanel;
class FragmentationPanel;
class MemoryPanel;
class NoCachePanel;
class PlannerPanel;
class PrefixPanel;
class SettingsPanel;
class WorkloadPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  EngineHost* host() const { return host_; }
  BlockMapPanel* blockMapPanel() const { return blockMap_; }
  ChatPanel* chatPanel() const { return chat_; }
  SettingsPanel* settingsPanel() const { return settings_; }
  MemoryPanel* memoryPanel() const { return memory_; }
  WorkloadPanel* workloadPanel() const { return workload_; }
  CaptionsPanel* captionsPanel() const { return captions_; }
  PrefixPanel* prefixPanel() const { return prefix_; }
  FragmentationPanel* fragmentationPanel() const { return frag_; }
  ComparePanel* comparePanel() const { return compare_; }
  PlannerPanel* plannerPanel() const { return planner_; }
  NoCachePanel* noCachePanel() const { return noCache_; }
  QList<QDockWidget*> panelDocks() const { return docks_; }

  // Loads `path` with the settings panel's current engine settings (or defaults if invalid).
  void openModel(const QString& path);
  void showGuide();
  void setTheme(const QString& name);
  QString lastError() const { return lastError_; }
  int errorCount() const { return errorCount_; }
  void resetLayout();
  // Writes the newest engine snapshot (every block, sequence table, counter, memory figure and
  // the block events it carries) as JSON to `path`; false, with lastError() saying why, when no
  // engine has run yet or the file cannot be written.
  bool exportSnapshotJson(const QString& path);
  // Longest time the UI thread spent handing one snapshot to the panels (not counting paint).
  double worstSnapshotMs() const { return worstSnapshotMs_; }
  double lastSnapshotMs() const { return lastSnapshotMs_; }  // the newest hand-off
  // The slowest hand-off of each panel so far (panel name -> ms).
  const QMap<QString, double>& worstPanelMs() const { return worstPanelMs_; }

 protected:
  void closeEvent(QCloseEvent* e) override;
  void showEvent(QShowEvent* e) override;

 private:
  QDockWidget* addPanel(QWidget* w, const QString& title, const QString& objectName, Qt::DockWidgetArea area,
                        const QString& help);
  void buildMenus();
  void buildStatusBar();
  void onSnapshot(const SnapshotPtr& snap, const EventBatch& events);
  void onModelLoaded(const ModelInfo& info);
  void onError(const QString& msg);
  void onLoading(bool loading, const QString& what);
  void browseModel();
  void applyDefaultDockSizes();

  EngineHost* host_;
  BlockMapPanel* blockMap_ = nullptr;
  ChatPanel* chat_ = nullptr;
  SettingsPanel* settings_ = nullptr;
  MemoryPanel* memory_ = nullptr;
  WorkloadPanel* workload_ = nullptr;
  CaptionsPanel* captions_ = nullptr;
  PrefixPanel* prefix_ = nullptr;
  FragmentationPanel* frag_ = nullptr;
  ComparePanel* compare_ = nullptr;
  PlannerPanel* planner_ = nullptr;
  NoCachePanel* noCache_ = nullptr;
  QList<QDockWidget*> docks_;
  QByteArray defaultState_;
  bool restoredState_ = false;
  bool shown_ = false;

  QLabel* banner_ = nullptr;
  QWidget* bannerBox_ = nullptr;
  QLabel *kvLabel_ = nullptr, *backendLabel_ = nullptr;
  LiveLabel* runLabel_ = nullptr;
  QProgressBar* busy_ = nullptr;
  QString lastError_;
  int errorCount_ = 0;
  double worstSnapshotMs_ = 0, lastSnapshotMs_ = 0;
  QMap<QString, double> worstPanelMs_;
  QString loadedPath_;
};

}  // namespace kvscope::ui
