#pragma once
// The workbench window: the block map in the middle, every other panel in a dock (layout
// remembered with QSettings), menus, and a status bar with the KV summary and backend. It owns
// one EngineHost and fans each delivered snapshot out to the registered SnapshotViews
// (snapshot_view.h); panels only store the pointer and repaint, so the UI thread never waits on
// the engine. A new panel: one file, one addPanel line in the constructor.
#include <QMainWindow>
#include <QMap>
#include <QPointer>

#include "engine_bridge/engine_host.h"
#include "lessons/lesson_stage.h"
#include "panels/snapshot_view.h"

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
class LessonsPanel;
class MemoryPanel;
class NoCachePanel;
class HybridStatePanel;
class LatentKvPanel;
class PlannerPanel;
class PrefixPanel;
class SettingsPanel;
class ServeController;
class ServeMenu;
class WorkloadPanel;

class MainWindow : public QMainWindow, public LessonStage {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  EngineHost* host() const override { return host_; }
  // The docked panel of type T (null if none), e.g. panel<MemoryPanel>().
  template <class T>
  T* panel() const {
    for (QDockWidget* d : docks_)
      if (T* p = qobject_cast<T*>(dockContent(d))) return p;
    return nullptr;
  }
  BlockMapPanel* blockMapPanel() const { return blockMap_; }
  ChatPanel* chatPanel() const { return chat_; }
  SettingsPanel* settingsPanel() const { return settings_; }
  MemoryPanel* memoryPanel() const;
  WorkloadPanel* workloadPanel() const;
  CaptionsPanel* captionsPanel() const;
  PrefixPanel* prefixPanel() const;
  FragmentationPanel* fragmentationPanel() const;
  ComparePanel* comparePanel() const { return compare_; }
  PlannerPanel* plannerPanel() const;
  NoCachePanel* noCachePanel() const { return noCache_; }
  LatentKvPanel* latentKvPanel() const { return latentKv_; }
  HybridStatePanel* hybridStatePanel() const { return hybridState_; }
  ServeController* serveController() const { return serve_; }  // the Serve toggle's server
  ServeMenu* serveMenu() const { return serveMenu_; }
  QList<QDockWidget*> panelDocks() const { return docks_; }          // in registration order
  QDockWidget* panelDock(const QString& objectName) const override;  // null if no dock has that name

  // LessonStage: what the Lessons panel asks of the workbench.
  bool stageEngineConfig(const EngineConfigEdit& edit, QString* why) override;
  void applyStagedEngineConfig() override;
  bool runScenario(const QString& key) override;
  void presetCompareB(const EngineConfigEdit& b, std::optional<bool> quality) override;
  void startNoCacheComparison() override;
  void startLatentComparison() override;
  void startHybridComparison() override;
  void clearCaptions() override;
  QWidget* centralPanel() const override;

  // Loads `path` with the settings panel's current engine settings (or defaults if invalid).
  void openModel(const QString& path);
  void showGuide();
  // Shows the Lessons panel and, for number >= 1, applies that lesson (Help > Lessons, --lesson N);
  // false for an unknown lesson.
  bool showLesson(int number);
  LessonsPanel* lessonsPanel() const { return lessons_; }
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
  // Docks `w`, tabbed behind the first panel registered in the same area; a SnapshotView is
  // also fed every snapshot and told about every new engine.
  QDockWidget* addPanel(QWidget* w, const QString& title, const QString& objectName, Qt::DockWidgetArea area,
                        const QString& help);
  static QWidget* dockContent(QDockWidget* d);
  void buildMenus();
  void buildStatusBar();
  void onSnapshot(const SnapshotPtr& snap, const EventBatch& events);
  void onModelLoaded(const ModelInfo& info);
  void onError(const QString& msg);
  void onLoading(bool loading, const QString& what);

 public:
  // A status bar message elided to the room left of the permanent labels (full text in the
  // status bar's tooltip); ms = 0 keeps it until replaced.
  void showStatus(const QString& text, int ms);
  int statusMessageWidth() const;

 private:
  void browseModel();
  void applyDefaultDockSizes();

  EngineHost* host_;
  // The panels the window itself talks to; every other panel is reached through its dock.
  BlockMapPanel* blockMap_ = nullptr;
  ChatPanel* chat_ = nullptr;
  SettingsPanel* settings_ = nullptr;
  ComparePanel* compare_ = nullptr;
  NoCachePanel* noCache_ = nullptr;
  LatentKvPanel* latentKv_ = nullptr;
  HybridStatePanel* hybridState_ = nullptr;
  LessonsPanel* lessons_ = nullptr;
  ServeController* serve_ = nullptr;
  ServeMenu* serveMenu_ = nullptr;
  QList<QDockWidget*> docks_;
  struct View {
    QString name;  // for the per-panel hand-off times
    SnapshotView* view;
  };
  QList<View> views_;  // the block map, then the docked SnapshotViews in registration order
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
