#include "panels/workload_panel.h"

#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QFontMetrics>
#include <QHeaderView>
#include <QTableWidget>
#include <QTimer>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSlider>
#include <QVBoxLayout>
#include <array>

namespace kvscope::ui {

WorkloadPanel::WorkloadPanel(EngineHost* host, QWidget* parent) : QWidget(parent), host_(host) {
  box_ = new QComboBox;
  box_->setToolTip(
      tr("The scenario files of resources/scenarios (the same ones kvscope-cli runs), plus a generated "
         "pool-pressure run."));
  auto* open = new QPushButton(tr("Open…"));
  open->setToolTip(tr("Load a scenario JSON file from disk."));
  auto* pick = new QHBoxLayout;
  pick->addWidget(box_, 1);
  pick->addWidget(open);
  desc_ = new QLabel;
  desc_->setWordWrap(true);
  desc_->setMinimumHeight(48);
  desc_->setAlignment(Qt::AlignTop | Qt::AlignLeft);

  run_ = new QPushButton(tr("Run"));
  run_->setToolTip(tr("Submit the scenario's requests at their arrival steps."));
  pause_ = new QPushButton(tr("Pause"));
  pause_->setCheckable(true);
  pause_->setToolTip(tr("Stop stepping the engine (requests stay where they are)."));
  step_ = new QPushButton(tr("Step"));
  step_->setToolTip(tr("Run exactly one engine step; the teaching captions explain its block events."));
  stop_ = new QPushButton(tr("Cancel all"));
  stop_->setToolTip(tr("Cancel every request; their blocks return to the pool."));
  auto* buttons = new QHBoxLayout;
  for (QPushButton* b : {run_, pause_, step_, stop_}) buttons->addWidget(b);

  delay_ = new QSlider(Qt::Horizontal);
  delay_->setRange(0, 250);
  delay_->setToolTip(tr("Slow motion: wait this long between engine steps, to watch the block map change."));
  delayLabel_ = new QLabel;
  auto* delayRow = new QHBoxLayout;
  delayRow->addWidget(new QLabel(tr("Slow motion")));
  delayRow->addWidget(delay_, 1);
  delayRow->addWidget(delayLabel_);
  progress_ = new QProgressBar;
  progress_->setFormat(tr("%v / %m requests"));
  progress_->setRange(0, 1);
  progress_->setValue(0);

  table_ = new QTableWidget(0, 6);
  table_->setHorizontalHeaderLabels({tr("request"), tr("state"), tr("prompt"), tr("cached"), tr("gen"), tr("TTFT ms")});
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(20);
  // Column widths are set by refreshTable from the font, not by ResizeToContents: that mode
  // re-measures every row of a column on each cell change, which stalled the UI thread for
  // seconds on a 200-row refresh.
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->horizontalHeader()->setDefaultSectionSize(44);  // grown to the text by refreshTable
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  table_->setToolTip(
      tr("Every request in the newest snapshot: prompt tokens, how many came from the prefix cache, "
         "tokens generated so far and time to first token."));
  tableTimer_ = new QTimer(this);
  tableTimer_->setSingleShot(true);
  tableTimer_->setInterval(250);
  connect(tableTimer_, &QTimer::timeout, this, &WorkloadPanel::refreshTable);

  auto* v = new QVBoxLayout(this);
  v->addLayout(pick);
  v->addWidget(desc_);
  v->addLayout(buttons);
  v->addLayout(delayRow);
  v->addWidget(progress_);
  v->addWidget(table_, 1);

  refreshList();
  setStepDelay(0);
  connect(box_, &QComboBox::currentIndexChanged, this, &WorkloadPanel::updateDescription);
  connect(open, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, tr("Open scenario"), QString(), tr("Scenario files (*.json)"));
    if (p.isEmpty()) return;
    box_->addItem(QFileInfo(p).fileName(), p);
    box_->setCurrentIndex(box_->count() - 1);
  });
  connect(run_, &QPushButton::clicked, this, [this] { run(box_->currentData().toString()); });
  connect(pause_, &QPushButton::toggled, host_, &EngineHost::setPaused);
  connect(host_->worker(), &EngineThreadWorker::pausedChanged, this, [this](bool p) {
    const QSignalBlocker b(pause_);
    pause_->setChecked(p);
    pause_->setText(p ? tr("Resume") : tr("Pause"));
  });
  connect(step_, &QPushButton::clicked, host_, &EngineHost::singleStep);
  connect(stop_, &QPushButton::clicked, host_, &EngineHost::cancelAll);
  connect(delay_, &QSlider::valueChanged, this, &WorkloadPanel::setStepDelay);
  connect(host_->worker(), &EngineThreadWorker::workloadProgress, this, [this](int done, int total) {
    done_ = done;
    total_ = total;
    progress_->setRange(0, std::max(1, total));
    progress_->setValue(done);
  });
  for (QWidget* w : {static_cast<QWidget*>(run_), static_cast<QWidget*>(step_)}) w->setEnabled(false);
}

void WorkloadPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch&) {
  pending_ = snap;
  if (!tableTimer_->isActive()) tableTimer_->start();
}

void WorkloadPanel::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  refreshTable();
}

void WorkloadPanel::refreshTable() {
  if (!pending_ || !isVisible()) return;
  constexpr size_t kMaxRows = 200;  // the newest requests; older ones are in the CSV/JSON exports
  const auto& seqs = pending_->seqs;
  const size_t first = seqs.size() > kMaxRows ? seqs.size() - kMaxRows : 0;
  table_->setRowCount(static_cast<int>(seqs.size() - first));
  const QFontMetrics fm(table_->font());
  std::array<int, 6> widest{};
  for (int c = 0; c < 6; ++c)
    if (const QTableWidgetItem* h = table_->horizontalHeaderItem(c))
      widest[static_cast<size_t>(c)] = fm.horizontalAdvance(h->text());
  auto set = [this, &fm, &widest](int r, int c, const QString& text) {
    QTableWidgetItem* it = table_->item(r, c);
    if (!it) table_->setItem(r, c, it = new QTableWidgetItem);
    if (it->text() != text) it->setText(text);
    widest[static_cast<size_t>(c)] = std::max(widest[static_cast<size_t>(c)], fm.horizontalAdvance(text));
  };
  for (size_t i = first; i < seqs.size(); ++i) {
    const SeqSnap& q = seqs[i];
    const int r = static_cast<int>(i - first);
    set(r, 0, QString::fromStdString(q.label));
    table_->item(r, 0)->setData(Qt::UserRole, static_cast<qlonglong>(q.id));  // the story view reads it
    set(r, 1,
        QString::fromUtf8(seq_state_name(q.state)) +
            (q.preemptions ? tr(" (preempted %1×)").arg(q.preemptions) : QString()));
    set(r, 2, QString::number(q.prompt_len));
    set(r, 3, QString::number(q.cached_prompt_tokens));
    set(r, 4, QString::number(q.generated));
    set(r, 5, q.ttft_ms >= 0 ? QString::number(q.ttft_ms, 'f', 1) : QStringLiteral("—"));
  }
  // Fit the columns to their text, measured once per refresh (a few hundred glyph runs), and
  // only grow them so that a column the user dragged wider stays.
  constexpr int kPad = 14;
  for (int c = 0; c < 5; ++c)
    if (table_->columnWidth(c) < widest[static_cast<size_t>(c)] + kPad)
      table_->setColumnWidth(c, widest[static_cast<size_t>(c)] + kPad);
}

void WorkloadPanel::refreshList() {
  box_->clear();
  for (const ScenarioEntry& e : scenario_entries()) box_->addItem(e.name, e.key);
  updateDescription();
}

void WorkloadPanel::setStepDelay(int ms) {
  if (delay_->value() != ms) delay_->setValue(ms);
  delayLabel_->setText(tr("%1 ms/step").arg(ms));
  host_->setStepDelay(ms);
}

std::optional<Scenario> WorkloadPanel::currentScenario(QString* error) const {
  const QString key = box_->currentData().toString();
  try {
    return load_scenario(key);
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return std::nullopt;
  }
}

void WorkloadPanel::updateDescription() {
  QString err;
  const auto s = currentScenario(&err);
  desc_->setText(s ? tr("%1<br><i>%2 requests</i>")
                         .arg(QString::fromStdString(s->description).toHtmlEscaped())
                         .arg(scenario_request_count(*s))
                   : tr("<span style='color:#c62828'>%1</span>").arg(err.toHtmlEscaped()));
}

void WorkloadPanel::resetForEngine(const ModelInfo&) {
  run_->setEnabled(true);
  step_->setEnabled(true);
  progress_->setRange(0, 1);
  progress_->setValue(0);
}

bool WorkloadPanel::run(const QString& nameOrPath) {
  int idx = box_->findData(nameOrPath);
  if (idx < 0) idx = box_->findText(nameOrPath);
  if (idx < 0 && QFileInfo(nameOrPath).isFile()) {
    box_->addItem(QFileInfo(nameOrPath).fileName(), QFileInfo(nameOrPath).absoluteFilePath());
    idx = box_->count() - 1;
  }
  if (idx < 0) {
    desc_->setText(tr("<span style='color:#c62828'>Unknown scenario %1</span>").arg(nameOrPath.toHtmlEscaped()));
    return false;
  }
  box_->setCurrentIndex(idx);
  QString err;
  const auto s = currentScenario(&err);
  if (!s) return false;
  done_ = 0;
  total_ = scenario_request_count(*s);
  progress_->setRange(0, std::max(1, total_));
  progress_->setValue(0);
  host_->runWorkload(*s);
  emit scenarioStarted(*s);
  return true;
}

}  // namespace kvscope::ui
