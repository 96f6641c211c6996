#include "shell/main_window.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QStatusBar>
#include <QTextBrowser>
#include <QToolButton>
#include <QVBoxLayout>

#include "attach_view/attach_window.h"
#include "panels/block_map_panel.h"
#include "panels/captions_panel.h"
#include "panels/chat_panel.h"
#include "controls/compare_panel.h"
#include "panels/fragmentation_panel.h"
#include "lessons/lessons_panel.h"
#include "widgets/live_label.h"
#include "panels/memory_panel.h"
#include "panels/capacity_panel.h"
#include "panels/hybrid_state_panel.h"
#include "panels/latent_kv_panel.h"
#include "panels/no_cache_panel.h"
#include "panels/planner_panel.h"
#include "panels/prefix_panel.h"
#include "panels/request_story_panel.h"
#include "serving/serve_controller.h"
#include "shell/story_wiring.h"
#include "serving/serve_menu.h"
#include "controls/settings_panel.h"
#include "telemetry/snapshot_json.h"
#include "widgets/theme.h"
#include "panels/workload_panel.h"

namespace kvscope::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("kvscope — KV cache workbench"));
  setObjectName(QStringLiteral("kvscopeMainWindow"));
  setDockNestingEnabled(true);
  host_ = new EngineHost(this);

  // Central area: an error banner over the block map (errors never pop a modal box, so a
  // running workload or a test is never blocked by one).
  banner_ = new QLabel;
  banner_->setWordWrap(true);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* close = new QToolButton;
  close->setText(QStringLiteral("✕"));
  close->setAutoRaise(true);
  bannerBox_ = new QWidget;
  bannerBox_->setObjectName(QStringLiteral("errorBanner"));
  bannerBox_->setStyleSheet(
      QStringLiteral("#errorBanner{background:#fdecea;border:1px solid #e57373;border-radius:4px}"
                     "#errorBanner QLabel{color:#8e1b1b}"));
  auto* bl = new QHBoxLayout(bannerBox_);
  bl->setContentsMargins(8, 4, 4, 4);
  bl->addWidget(banner_, 1);
  bl->addWidget(close, 0, Qt::AlignTop);
  bannerBox_->hide();
  connect(close, &QToolButton::clicked, bannerBox_, &QWidget::hide);

  blockMap_ = new BlockMapPanel;
  blockMap_->setWhatsThis(tr("Every physical KV block of the pool, coloured by the sequence that owns it."));
  views_.push_back({QStringLiteral("block map"), blockMap_});
  auto* central = new QWidget;
  auto* cv = new QVBoxLayout(central);
  cv->setContentsMargins(0, 0, 0, 0);
  cv->setSpacing(2);
  cv->addWidget(bannerBox_);
  cv->addWidget(blockMap_, 1);
  setCentralWidget(central);

  chat_ = new ChatPanel(host_);
  settings_ = new SettingsPanel;
  compare_ = new ComparePanel(settings_);
  noCache_ = new NoCachePanel(settings_);
  latentKv_ = new LatentKvPanel;
  hybridState_ = new HybridStatePanel;

  // The registration: one line per panel. Panels of one area are tabs of its first one.
  addPanel(
      chat_, tr("Chat"), QStringLiteral("chatDock"), Qt::LeftDockWidgetArea,
      tr("Talk to the loaded model. Each turn re-sends the whole conversation, so the earlier turns come "
         "from the prefix cache; the grey line under a reply shows prompt tokens, cached tokens, TTFT and speed."));
  addPanel(settings_, tr("Settings"), QStringLiteral("settingsDock"), Qt::RightDockWidgetArea,
           tr("Engine settings (model, block size, pool size, KV dtype, window, sinks, prefix caching, batch) and "
              "sampling defaults. Invalid values are refused with an explanation; Apply rebuilds the engine."));
  addPanel(new WorkloadPanel(host_), tr("Workload"), QStringLiteral("workloadDock"), Qt::RightDockWidgetArea,
           tr("Run a scenario (many requests arriving over time) and pause, single-step or resume the engine."));
  addPanel(compare_, tr("Compare"), QStringLiteral("compareDock"), Qt::RightDockWidgetArea,
           tr("Run the same workload on two engine configurations side by side and compare memory, waste, "
              "prefix hits and speed."));
  addPanel(new MemoryPanel, tr("Memory over time"), QStringLiteral("memoryDock"), Qt::BottomDockWidgetArea,
           tr("KV blocks used, cached and free over time, with tokens per second and preemptions."));
  addPanel(new FragmentationPanel, tr("Fragmentation"), QStringLiteral("fragDock"), Qt::BottomDockWidgetArea,
           tr("How much of the reserved KV memory actually holds tokens: with paging only each sequence's last "
              "block is partly empty."));
  addPanel(new PrefixPanel, tr("Prefix sharing"), QStringLiteral("prefixDock"), Qt::BottomDockWidgetArea,
           tr("Which sequences share which blocks through the prefix cache: the hash-chain tree with reference "
              "counts, hit counters and each request's reused tokens."));
  addPanel(new CaptionsPanel, tr("Teaching captions"), QStringLiteral("captionsDock"), Qt::BottomDockWidgetArea,
           tr("One plain-language sentence per block event (allocated, shared, cached, evicted, freed…). "
              "Single-step the engine to follow them one step at a time."));
  addPanel(new PlannerPanel, tr("KV calculator"), QStringLiteral("plannerDock"), Qt::RightDockWidgetArea,
           tr("KV cache memory of a model at a context length, batch, weight precision and KV dtype, with the "
              "formula shown; preloaded with the 70B-at-128K example, with and without grouped-query attention."));
  addPanel(noCache_, tr("No KV cache vs cached"), QStringLiteral("noCacheDock"), Qt::BottomDockWidgetArea,
           tr("Teaching: the same prompt generated twice, with the KV cache and without it (the whole sequence "
              "recomputed for every token). Per generated token, the tokens computed and the step time, read from "
              "the engine's snapshots: flat with the cache, growing linearly without it."));
  addPanel(latentKv_, tr("Latent KV"), QStringLiteral("latentDock"), Qt::BottomDockWidgetArea,
           tr("Teaching: DeepSeek's latent attention against grouped-query attention. The same prompt through two "
              "small synthetic models of the same width, each with the same KV memory: the row each caches per "
              "token, its bytes, and the blocks the same memory holds."));
  addPanel(hybridState_, tr("Hybrid state"), QStringLiteral("hybridDock"), Qt::BottomDockWidgetArea,
           tr("Teaching: why Qwen3.5's cache barely grows. One long prompt through a small hybrid (Gated DeltaNet "
              "in three layers of four: a fixed state per sequence) and a same-width model with attention in every "
              "layer: memory held at each length, read from both engines, and the break-even length."));
  addPanel(new CapacityPanel, tr("Capacity"), QStringLiteral("capacityDock"), Qt::BottomDockWidgetArea,
           tr("What-if on a real request trace (Mooncake's, or this server's own recording): the prefix-cache hit "
              "ratio against cache size, routers and a CPU tier side by side, and what one more GiB of KV buys."));
  auto* story = new RequestStoryPanel(host_);
  addPanel(
      story, tr("Request story"), QStringLiteral("storyDock"), Qt::BottomDockWidgetArea,
      tr("One request's KV story in plain sentences: arrival, waits and why, its prefix hit and why the first "
         "block missed, blocks, copies, preemptions and where its blocks went. Click a sentence to see its step."));
  connect_story_sources(story, blockMap_, workloadPanel(), chat_);
  lessons_ = new LessonsPanel(this);
  addPanel(lessons_, tr("Lessons"), QStringLiteral("lessonsDock"), Qt::LeftDockWidgetArea,
           tr("Guided lessons on the real engine: each sets up the engine and a scenario, explains one idea in a few "
              "steps and frames the panel to look at. Step runs one engine step and says what it did to the blocks."));
  QList<Qt::DockWidgetArea> opened;  // each area opens on its first panel's tab
  for (QDockWidget* d : docks_)
    if (!opened.contains(dockWidgetArea(d))) {
      opened << dockWidgetArea(d);
      d->raise();
    }

  serve_ = new ServeController(host_, this);
  serveMenu_ = new ServeMenu(this, serve_);
  connect(serve_, &ServeController::error, this, &MainWindow::onError);
  buildMenus();
  buildStatusBar();
  settings_->load();

  connect(host_, &EngineHost::snapshot, this, &MainWindow::onSnapshot);
  connect(host_, &EngineHost::modelLoaded, this, &MainWindow::onModelLoaded);
  connect(host_, &EngineHost::error, this, &MainWindow::onError);
  connect(host_, &EngineHost::loadingChanged, this, &MainWindow::onLoading);
  connect(settings_, &SettingsPanel::applyRequested, this, [this](const EngineConfig& cfg, const QString& path) {
    bannerBox_->hide();
    host_->setBackend(settings_->backendChoice());
    if (path != loadedPath_ || !host_->hasEngine())
      host_->loadModel(path, cfg);
    else
      host_->applyConfig(cfg);
  });
  connect(settings_, &SettingsPanel::browseRequested, this, &MainWindow::browseModel);
  connect(settings_, &SettingsPanel::samplingDefaultsChanged, chat_, &ChatPanel::setSamplingDefaults);
  chat_->setSamplingDefaults(settings_->samplingDefaults());

  resize(1280, 800);
  defaultState_ = saveState();  // the built-in layout, for View > Reset layout
  QSettings s;
  restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray());
  restoredState_ = restoreState(s.value(QStringLiteral("window/state")).toByteArray());
}

void MainWindow::showEvent(QShowEvent* e) {
  QMainWindow::showEvent(e);
  if (!shown_) {
    shown_ = true;
    // Dock sizes only mean something once the window has its real size.
    if (!restoredState_) applyDefaultDockSizes();
  }
}

void MainWindow::applyDefaultDockSizes() {
  // Chat left, settings right, plots below: the block map in the middle gets the most room.
  resizeDocks({panelDock(QStringLiteral("chatDock")), panelDock(QStringLiteral("settingsDock"))},
              {width() * 27 / 100, width() * 24 / 100}, Qt::Horizontal);
  resizeDocks({panelDock(QStringLiteral("memoryDock"))}, {height() * 30 / 100}, Qt::Vertical);
}

MainWindow::~MainWindow() {
  serve_->stop();  // before the host: it still talks to the engine thread
  host_->shutdown();
}

QDockWidget* MainWindow::addPanel(QWidget* w, const QString& title, const QString& objectName, Qt::DockWidgetArea area,
                                  const QString& help) {
  auto* d = new QDockWidget(title, this);
  d->setObjectName(objectName);  // saveState/restoreState identify docks by object name
  d->setWidget(w);
  w->setWhatsThis(help);
  w->setToolTip(help);
  d->setToolTip(help);
  QDockWidget* lastInArea = nullptr;  // a new tab goes last: the tabs keep the registration order
  for (QDockWidget* e : docks_)
    if (dockWidgetArea(e) == area) lastInArea = e;
  addDockWidget(area, d);
  if (lastInArea) tabifyDockWidget(lastInArea, d);
  docks_ << d;
  if (auto* v = dynamic_cast<SnapshotView*>(w)) views_.push_back({title, v});
  return d;
}

QWidget* MainWindow::dockContent(QDockWidget* d) { return d->widget(); }

bool MainWindow::stageEngineConfig(const EngineConfigEdit& edit, QString* why) {
  settings_->applyEdit(edit);
  return settings_->config(why).has_value();
}

void MainWindow::applyStagedEngineConfig() { settings_->applyButton()->click(); }

bool MainWindow::runScenario(const QString& key) { return workloadPanel()->run(key); }

void MainWindow::presetCompareB(const EngineConfigEdit& b, std::optional<bool> quality) {
  compare_->presetB(b, quality);
}

void MainWindow::startNoCacheComparison() {
  if (!noCache_->isRunning()) noCache_->runButton()->click();
}

void MainWindow::startLatentComparison() {
  if (!latentKv_->isRunning()) latentKv_->runButton()->click();
}

void MainWindow::startHybridComparison() {
  if (!hybridState_->isRunning()) hybridState_->runButton()->click();
}

void MainWindow::clearCaptions() {
  if (CaptionsPanel* c = captionsPanel()) c->clear();
}

QWidget* MainWindow::centralPanel() const { return blockMap_; }

QDockWidget* MainWindow::panelDock(const QString& objectName) const {
  for (QDockWidget* d : docks_)
    if (d->objectName() == objectName) return d;
  return nullptr;
}

MemoryPanel* MainWindow::memoryPanel() const { return panel<MemoryPanel>(); }
WorkloadPanel* MainWindow::workloadPanel() const { return panel<WorkloadPanel>(); }
CaptionsPanel* MainWindow::captionsPanel() const { return panel<CaptionsPanel>(); }
PrefixPanel* MainWindow::prefixPanel() const { return panel<PrefixPanel>(); }
FragmentationPanel* MainWindow::fragmentationPanel() const { return panel<FragmentationPanel>(); }
PlannerPanel* MainWindow::plannerPanel() const { return panel<PlannerPanel>(); }

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open model…"), QKeySequence::Open, this, &MainWindow::browseModel);
  QMenu* recent = file->addMenu(tr("Open &recent"));
  connect(recent, &QMenu::aboutToShow, this, [this, recent] {
    recent->clear();
    for (const QString& p : settings_->recentModels()) recent->addAction(p, this, [this, p] { openModel(p); });
    if (recent->isEmpty()) recent->addAction(tr("(none yet)"))->setEnabled(false);
  });
  file->addAction(tr("&Export engine snapshot (JSON)…"), this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Export engine snapshot"),
                                                   QStringLiteral("kvscope-snapshot.json"), tr("JSON files (*.json)"));
    if (!p.isEmpty() && exportSnapshotJson(p)) showStatus(tr("snapshot written to %1").arg(p), 5000);
  });
  file->addSeparator();
  file->addAction(tr("&Attach to a deployment…"), this, [this] { open_attach_dialog(this); });  // attach_window.h
  file->addAction(tr("Open attach &recording…"), this, [this] { open_attach_recording(this); });
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  QMenu* engine = menuBar()->addMenu(tr("&Engine"));
  QAction* pause = engine->addAction(tr("&Pause"));
  pause->setCheckable(true);
  pause->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_P));
  connect(pause, &QAction::toggled, host_, &EngineHost::setPaused);
  connect(host_->worker(), &EngineThreadWorker::pausedChanged, pause, [pause](bool p) {
    const QSignalBlocker b(pause);
    pause->setChecked(p);
  });
  engine->addAction(tr("Single &step"), QKeySequence(Qt::Key_F10), host_, &EngineHost::singleStep);
  engine->addAction(tr("&Cancel all requests"), host_, &EngineHost::cancelAll);
  engine->addSeparator();
  engine->addAction(tr("&Apply settings"), this, [this] { settings_->applyButton()->click(); });

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (QDockWidget* d : docks_) view->addAction(d->toggleViewAction());
  view->addSeparator();
  view->addAction(tr("&Reset layout"), this, &MainWindow::resetLayout);
  QMenu* theme = view->addMenu(tr("&Theme"));
  auto* group = new QActionGroup(this);
  const QString current = QSettings().value(QStringLiteral("window/theme"), QStringLiteral("light")).toString();
  for (const auto& [name, label] :
       {std::pair{QStringLiteral("light"), tr("Light")}, std::pair{QStringLiteral("dark"), tr("Dark")},
        std::pair{QStringLiteral("system"), tr("System")}}) {
    QAction* a = theme->addAction(label, this, [this, n = name] { setTheme(n); });
    a->setCheckable(true);
    a->setChecked(name == current);
    group->addAction(a);
  }

  menuBar()->addMenu(serveMenu_->menu());

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&Guide"), QKeySequence::HelpContents, this, &MainWindow::showGuide);
  help->addAction(tr("&Lessons"), this, [this] { showLesson(0); });
  help->addAction(tr("&About kvscope"), this, [this] {
    QMessageBox::about(this, tr("About kvscope"),
                       tr("<b>kvscope %1</b><p>A workbench that runs a real paged-attention LLM engine and shows its "
                          "KV cache live.</p>")
                           .arg(QStringLiteral(KVSCOPE_VERSION)));
  });
}

void MainWindow::buildStatusBar() {
  busy_ = new QProgressBar;
  busy_->setRange(0, 0);  // indeterminate: Model::load reports no progress
  busy_->setMaximumWidth(120);
  busy_->setMaximumHeight(14);
  busy_->hide();
  runLabel_ = new LiveLabel;
  runLabel_->setFixedWidth(230);  // fixed: a status bar lays out its permanent widgets by size
  runLabel_->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Fixed);
  kvLabel_ = new QLabel(tr("no engine"));
  kvLabel_->setToolTip(tr("The engine's KV pool: blocks, tokens, memory and the concurrency it allows."));
  backendLabel_ = new QLabel;
  statusBar()->addPermanentWidget(serveMenu_->statusLabel());
  statusBar()->addPermanentWidget(busy_);
  statusBar()->addPermanentWidget(runLabel_);
  statusBar()->addPermanentWidget(kvLabel_);
  statusBar()->addPermanentWidget(backendLabel_);
}

void MainWindow::setTheme(const QString& name) {
  apply_theme(name);
  QSettings().setValue(QStringLiteral("window/theme"), name);
  update();  // the plots restyle themselves on the palette change (restyle_on_palette_change)
}

void MainWindow::resetLayout() {
  restoreState(defaultState_);
  applyDefaultDockSizes();
}

void MainWindow::openModel(const QString& path) {
  settings_->setModelPath(path);
  QString why;
  auto cfg = settings_->config(&why);
  if (!cfg) {
    // Saved settings may be from an older version; fall back to defaults rather than refuse.
    cfg = default_gui_config();
    if (!QFileInfo(path).isFile()) {
      onError(tr("Model file %1 does not exist.").arg(path));
      return;
    }
  }
  bannerBox_->hide();
  host_->setBackend(settings_->backendChoice());
  host_->loadModel(path, *cfg);
}

void MainWindow::browseModel() {
  const QString dir = QFileInfo(settings_->modelPath()).absolutePath();
  const QString p =
      QFileDialog::getOpenFileName(this, tr("Open GGUF model"), dir, tr("GGUF models (*.gguf);;All files (*)"));
  if (!p.isEmpty()) openModel(p);
}

void MainWindow::showGuide() {
  auto* dlg = new QDialog(this);
  dlg->setAttribute(Qt::WA_DeleteOnClose);
  dlg->setWindowTitle(tr("kvscope guide"));
  auto* text = new QTextBrowser;
  QFile f(QStringLiteral(":/guide/guide.html"));
  text->setHtml(f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll())
                                            : tr("The guide is missing from this build."));
  text->setOpenExternalLinks(true);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
  connect(buttons, &QDialogButtonBox::rejected, dlg, &QDialog::close);
  auto* v = new QVBoxLayout(dlg);
  v->addWidget(text);
  v->addWidget(buttons);
  dlg->resize(640, 600);
  dlg->show();
}

bool MainWindow::showLesson(int number) {
  QDockWidget* d = panelDock(QStringLiteral("lessonsDock"));
  d->show();
  d->raise();
  return number <= 0 || lessons_->showLesson(number);
}

void MainWindow::onSnapshot(const SnapshotPtr& snap, const EventBatch& events) {
  if (!snap) return;
  QElapsedTimer t, part;
  t.start();
  part.start();
  // Each panel's share, for the frame benchmark: the slowest hand-off of each so far.
  auto lap = [this, &part](const QString& name) {
    double& worst = worstPanelMs_[name];
    worst = std::max(worst, part.nsecsElapsed() / 1e6);
    part.restart();
  };
  for (const View& v : views_) {
    v.view->showSnapshot(snap, events);
    lap(v.name);
  }
  const QString state = host_->isPaused() ? tr("paused") : (host_->isRunning() ? tr("running") : tr("idle"));
  runLabel_->setText(tr("step %1 · %2 tok/s · %3").arg(snap->step).arg(snap->tokens_per_s, 0, 'f', 0).arg(state));
  lap(QStringLiteral("status bar"));
  lastSnapshotMs_ = t.nsecsElapsed() / 1e6;
  worstSnapshotMs_ = std::max(worstSnapshotMs_, lastSnapshotMs_);
}

void MainWindow::onModelLoaded(const ModelInfo& info) {
  const bool sameModel = info.path == loadedPath_;
  loadedPath_ = info.path;
  settings_->setModelPath(info.path);
  settings_->showConfig(info.config);
  settings_->addRecentModel(info.path);
  QSettings().setValue(QStringLiteral("lastModel"), info.path);
  for (const View& v : views_) v.view->resetForEngine(info);
  const KvShape shape = kv_shape_of(info.modelConfig);
  settings_->setModel(info.modelConfig, shape);
  compare_->setKvShape(shape, info.config.block_size);
  chat_->engineRebuilt(sameModel);
  kvLabel_->setText(info.kvSummary.section(QStringLiteral(", max"), 0, 0));
  kvLabel_->setToolTip(info.kvSummary);
  backendLabel_->setText(tr("backend: %1").arg(info.backend));
  setWindowTitle(tr("kvscope — %1").arg(QFileInfo(info.path).fileName()));
  showStatus(info.description, 8000);
}

bool MainWindow::exportSnapshotJson(const QString& path) {
  const SnapshotPtr snap = host_->latest();
  if (!snap) {
    onError(tr("No engine snapshot to export yet: open a model first."));
    return false;
  }
  QFile f(path);
  const std::string text = to_json(*snap).dump(1);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate) ||
      f.write(text.data(), static_cast<qint64>(text.size())) != static_cast<qint64>(text.size())) {
    onError(tr("Could not write the snapshot to %1: %2").arg(path, f.errorString()));
    return false;
  }
  return true;
}

void MainWindow::onError(const QString& msg) {
  lastError_ = msg;
  ++errorCount_;
  banner_->setText(msg.toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>")));
  bannerBox_->show();
  showStatus(msg.section(QLatin1Char('\n'), 0, 0), 10000);
}

void MainWindow::onLoading(bool loading, const QString& what) {
  busy_->setVisible(loading);
  if (loading)
    showStatus(what, 0);
  else
    statusBar()->clearMessage();
}

int MainWindow::statusMessageWidth() const {
  // QStatusBar draws its message in what the permanent widgets on the right leave.
  // Their size hints, not their widths: a label whose text just changed is not laid out yet.
  int used = 0;
  for (QWidget* w :
       {static_cast<QWidget*>(serveMenu_->statusLabel()), static_cast<QWidget*>(busy_),
        static_cast<QWidget*>(runLabel_), static_cast<QWidget*>(kvLabel_), static_cast<QWidget*>(backendLabel_)})
    if (w->isVisibleTo(statusBar())) used += std::max(w->width(), w->sizeHint().width()) + 8;
  return std::max(40, statusBar()->width() - used - 24);
}

void MainWindow::showStatus(const QString& text, int ms) {
  // Cut to the room it has, with the whole message in the status bar's tooltip.
  const QString shown = statusBar()->fontMetrics().elidedText(text, Qt::ElideRight, statusMessageWidth());
  statusBar()->setToolTip(shown == text ? QString() : text);
  statusBar()->showMessage(shown, ms);
}

void MainWindow::closeEvent(QCloseEvent* e) {
  QSettings s;
  s.setValue(QStringLiteral("window/geometry"), saveGeometry());
  s.setValue(QStringLiteral("window/state"), saveState());
  // Stop the engine now (at the next step boundary) so closing mid-run never hangs.
  compare_->shutdown();
  noCache_->shutdown();
  latentKv_->shutdown();
  hybridState_->shutdown();
  serve_->stop();  // answers its clients before the engine thread goes
  host_->shutdown();
  QMainWindow::closeEvent(e);
}

}  // namespace kvscope::ui
