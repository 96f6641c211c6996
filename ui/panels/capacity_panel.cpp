#include "panels/capacity_panel.h"

#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>
#include <cmath>
#include <fstream>
#include <qcustomplot.h>

#include "kv/kv_planner.h"
#include "run/trace_reader.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

constexpr double kGib = 1024.0 * 1024.0 * 1024.0;
const QString kLoadedModel = QObject::tr("Loaded model");

QString tokens_text(int64_t n) { return QLocale(QLocale::English).toString(static_cast<qlonglong>(n)); }

int64_t parse_tokens(const QString& s, bool allow_zero) {
  const QString t = s.trimmed();
  if (allow_zero && t == QLatin1String("0")) return 0;
  const auto n = parse_token_count(t.toStdString());
  return n ? *n : -1;
}

}  // namespace

CapacityPanel::CapacityPanel(QWidget* parent) : QWidget(parent) {
  trace_ = new QLineEdit;
  trace_->setPlaceholderText(tr("a trace: Mooncake JSON lines, or kvscope's own (serve --record)"));
  browse_ = new QPushButton(tr("Browse…"));
  format_ = new QComboBox;
  format_->addItems({QStringLiteral("mooncake"), QStringLiteral("kvscope")});
  format_->setToolTip(tr("mooncake: 512-token hash ids; kvscope: each line says its block size"));
  blockSize_ = new QSpinBox;
  blockSize_->setRange(1, 4096);
  blockSize_->setValue(512);
  blockSize_->setToolTip(tr("Cache block size in tokens: must divide the trace's (512 for Mooncake)"));
  geometry_ = new QComboBox;
  geometry_->addItem(kLoadedModel);
  for (const PlanModel& m : plan_presets()) geometry_->addItem(QString::fromStdString(m.name));
  geometry_->setToolTip(tr("Whose KV bytes per token turn tokens into GiB (the loaded model, or a planner preset)"));
  kvDtype_ = new QComboBox;
  kvDtype_->addItems(
      {QStringLiteral("f16"), QStringLiteral("fp8_e4m3"), QStringLiteral("int8"), QStringLiteral("f32")});
  kvDtype_->setToolTip(tr("KV dtype of a preset geometry (the loaded model uses its own)"));
  pool_ = new QLineEdit(QStringLiteral("1M"));
  pool_->setToolTip(tr("Pool per instance in tokens (1M = 1,048,576): the routers, tiers and one-more-GiB use it"));
  instances_ = new QSpinBox;
  instances_->setRange(1, 256);
  instances_->setValue(4);
  instances_->setToolTip(tr("Instances behind each router"));
  cpu_ = new QLineEdit(QStringLiteral("0"));
  cpu_->setToolTip(tr("CPU tier per instance in tokens (0: no tier comparison)"));
  run_ = new QPushButton(tr("Run"));
  stop_ = new QPushButton(tr("Cancel"));
  stop_->setEnabled(false);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1);
  progress_->setValue(0);
  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setObjectName(QStringLiteral("capacityStatus"));
  marginal_ = new QLabel;
  marginal_->setWordWrap(true);
  marginal_->setTextFormat(Qt::RichText);
  marginal_->setObjectName(QStringLiteral("capacityMarginal"));

  plot_ = new QCustomPlot;
  plot_->setMinimumHeight(180);
  plot_->xAxis->setScaleType(QCPAxis::stLogarithmic);
  plot_->xAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  plot_->xAxis->setLabel(tr("KV cache (GiB, log scale)"));
  plot_->yAxis->setLabel(tr("prefix-cache hit ratio %"));
  plot_->yAxis->setRange(0, 100);
  plot_->addGraph()->setName(tr("one instance"));
  plot_->graph(0)->setPen(QPen(QColor(0x4e, 0x79, 0xa7), 2));
  plot_->graph(0)->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
  plot_->legend->setVisible(true);
  plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);

  table_ = new QTableWidget(0, 4);
  table_->setHorizontalHeaderLabels({tr("setup"), tr("hit ratio"), tr("GPU hit tokens"), tr("CPU hit tokens")});
  table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setMinimumHeight(120);

  auto* form = new QGridLayout;
  auto* traceRow = new QHBoxLayout;
  traceRow->addWidget(trace_, 1);
  traceRow->addWidget(browse_);
  form->addWidget(new QLabel(tr("Trace")), 0, 0);
  form->addLayout(traceRow, 0, 1, 1, 5);
  form->addWidget(new QLabel(tr("Format")), 1, 0);
  form->addWidget(format_, 1, 1);
  form->addWidget(new QLabel(tr("Block size")), 1, 2);
  form->addWidget(blockSize_, 1, 3);
  form->addWidget(new QLabel(tr("Geometry")), 2, 0);
  form->addWidget(geometry_, 2, 1);
  form->addWidget(new QLabel(tr("KV dtype")), 2, 2);
  form->addWidget(kvDtype_, 2, 3);
  form->addWidget(new QLabel(tr("Pool / instance")), 3, 0);
  form->addWidget(pool_, 3, 1);
  form->addWidget(new QLabel(tr("Instances")), 3, 2);
  form->addWidget(instances_, 3, 3);
  form->addWidget(new QLabel(tr("CPU tier")), 3, 4);
  form->addWidget(cpu_, 3, 5);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_);
  buttons->addWidget(stop_);
  buttons->addWidget(progress_, 1);

  auto* content = new QWidget;
  content->setMinimumSize(520, 480);
  auto* v = new QVBoxLayout(content);
  v->setContentsMargins(4, 4, 4, 4);
  v->addLayout(form);
  v->addLayout(buttons);
  v->addWidget(status_);
  v->addWidget(plot_, 3);
  v->addWidget(marginal_);
  v->addWidget(table_, 2);
  fill_with_scroll_area(this, content);

  connect(browse_, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Open a request trace"), trace_->text(),
                                                   tr("JSON lines (*.jsonl *.json);;All files (*)"));
    if (!f.isEmpty()) trace_->setText(f);
  });
  connect(format_, &QComboBox::currentTextChanged, this,
          [this](const QString& f) { blockSize_->setValue(f == QLatin1String("mooncake") ? 512 : 16); });
  connect(run_, &QPushButton::clicked, this, [this] { start(); });
  connect(stop_, &QPushButton::clicked, this, [this] { cancel(); });
  setStatus(tr("Open a trace and press Run: one replay per cache size, then the routers and tiers."));
}

CapacityPanel::~CapacityPanel() {
  cancel_ = true;
  if (worker_.joinable()) worker_.join();
}

void CapacityPanel::showSnapshot(const SnapshotPtr& snap, const EventBatch&) {
  if (snap) snap_ = snap;
}

double CapacityPanel::currentPoolGib() const {
  if (!snap_ || studyBytesPerToken_ <= 0) return 0;
  const int64_t tokens = static_cast<int64_t>(snap_->memory.blocks_total) * snap_->block_size;
  return static_cast<double>(tokens) * static_cast<double>(studyBytesPerToken_) / kGib;
}

int64_t CapacityPanel::bytesPerToken(QString* why) const {
  if (geometry_->currentText() == kLoadedModel) {
    if (!snap_ || snap_->memory.kv_bytes_per_token <= 0) {
      *why = tr("No model is loaded: load one, or choose a preset geometry.");
      return 0;
    }
    return snap_->memory.kv_bytes_per_token;
  }
  const auto m = find_plan_preset(geometry_->currentText().toStdString());
  const auto kv = parse_kv_dtype(kvDtype_->currentText().toStdString());
  if (!m || !kv) {
    *why = tr("Unknown geometry or KV dtype.");
    return 0;
  }
  return plan_kv_bytes_per_token(*m, *kv);
}

bool CapacityPanel::readForm(CapacityStudyInput& in, QString* why) const {
  in.block_size = blockSize_->value();
  in.instances = instances_->value();
  in.pool_tokens = parse_tokens(pool_->text(), false);
  in.cpu_tokens = parse_tokens(cpu_->text(), true);
  if (in.pool_tokens < in.block_size) {
    *why = tr("Pool per instance: a token count of at least one block (e.g. 65536, 512K or 1M).");
    return false;
  }
  if (in.cpu_tokens < 0) {
    *why = tr("CPU tier: a token count (0 for none, e.g. 4M).");
    return false;
  }
  in.kv_bytes_per_token = bytesPerToken(why);
  return in.kv_bytes_per_token > 0;
}

bool CapacityPanel::start() {
  if (running_) {
    setStatus(tr("A study is running: cancel it first."), true);
    return false;
  }
  CapacityStudyInput in;
  QString why;
  if (!readForm(in, &why)) {
    setStatus(why, true);
    return false;
  }
  const QString path = trace_->text().trimmed();
  if (path.isEmpty() || !QFileInfo(path).isFile()) {
    setStatus(tr("Trace: '%1' is not a readable file.").arg(path), true);
    return false;
  }
  if (worker_.joinable()) worker_.join();
  TraceReaderOptions ro;
  ro.format = format_->currentText() == QLatin1String("kvscope") ? TraceFormat::Kvscope : TraceFormat::Mooncake;
  running_ = true;
  cancel_ = false;
  studyBytesPerToken_ = in.kv_bytes_per_token;
  studyPoolTokens_ = in.pool_tokens;
  run_->setEnabled(false);
  stop_->setEnabled(true);
  progress_->setRange(0, 0);  // busy until the trace is read
  setStatus(tr("Reading %1…").arg(QFileInfo(path).fileName()));
  // The thread only touches its own copies and posts back to this object, which joins it
  // before it goes away (queued calls to a deleted receiver are dropped).
  worker_ = std::thread([this, in, ro, p = path.toStdString()] {
    auto study = std::make_shared<CapacityStudy>();
    bool completed = false;
    QString error;
    try {
      std::ifstream f(p, std::ios::binary);
      if (!f) throw std::runtime_error("cannot read " + p);
      const std::vector<TraceRequest> reqs = read_trace(f, ro);
      if (reqs.empty()) throw std::runtime_error("the trace has no requests");
      completed = run_capacity_study(
          reqs, in, *study,
          [this](int done, int total) {
            QMetaObject::invokeMethod(
                this, [this, done, total] { onProgress(done, total); }, Qt::QueuedConnection);
          },
          &cancel_);
    } catch (const std::exception& e) { error = QString::fromStdString(e.what()); }
    QMetaObject::invokeMethod(
        this, [this, completed, error, study] { onDone(completed, error, study); }, Qt::QueuedConnection);
  });
  return true;
}

void CapacityPanel::cancel() {
  if (running_) {
    cancel_ = true;
    setStatus(tr("Cancelling after the current replay…"));
  }
}

void CapacityPanel::onProgress(int done, int total) {
  progress_->setRange(0, total);
  progress_->setValue(done);
  setStatus(tr("Replaying: %1 of %2 passes").arg(done).arg(total));
}

void CapacityPanel::onDone(bool completed, const QString& error, std::shared_ptr<CapacityStudy> study) {
  if (worker_.joinable()) worker_.join();
  running_ = false;
  run_->setEnabled(true);
  stop_->setEnabled(false);
  progress_->setRange(0, 1);
  progress_->setValue(completed ? 1 : 0);
  if (!error.isEmpty()) {
    setStatus(tr("Failed: %1").arg(error), true);
  } else if (!completed) {
    setStatus(tr("Cancelled."));
  } else {
    study_ = std::move(*study);
    showStudy();
    setStatus(tr("Done: %1 requests, %2 prompt tokens.")
                  .arg(study_.curve.back().requests)
                  .arg(tokens_text(static_cast<int64_t>(study_.curve.back().prompt_tokens))));
  }
  emit studyFinished(completed && error.isEmpty());
}

void CapacityPanel::showStudy() {
  const double bpt = static_cast<double>(studyBytesPerToken_);
  QVector<double> x, y;
  for (const ReplayPoint& p : study_.curve) {
    const int64_t tokens = p.capacity_tokens == 0 ? study_.unbounded_tokens : p.capacity_tokens;
    x.push_back(static_cast<double>(tokens) * bpt / kGib);
    y.push_back(100.0 * p.hit_ratio());
  }
  plot_->graph(0)->setData(x, y, true);
  plot_->clearItems();
  auto mark = [this](double gib, const QString& what, const QColor& c) {
    if (gib <= 0) return;
    auto* line = new QCPItemStraightLine(plot_);
    line->point1->setCoords(gib, 0);
    line->point2->setCoords(gib, 100);
    line->setPen(QPen(c, 1.5, Qt::DashLine));
    auto* label = new QCPItemText(plot_);
    label->position->setCoords(gib, 96);
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
    label->setText(QStringLiteral(" ") + what);
    label->setColor(c);
  };
  mark(static_cast<double>(studyPoolTokens_) * bpt / kGib, tr("pool / instance"), QColor(0xe1, 0x57, 0x59));
  mark(currentPoolGib(), tr("this engine's pool"), QColor(0x59, 0xa1, 0x4f));
  if (!x.isEmpty()) plot_->xAxis->setRange(x.front() / 1.5, x.back() * 1.5);
  plot_->replot();

  table_->setRowCount(static_cast<int>(study_.rows.size()));
  for (int r = 0; r < static_cast<int>(study_.rows.size()); ++r) {
    const CapacityRow& row = study_.rows[static_cast<size_t>(r)];
    const QStringList cells = {QString::fromStdString(row.name),
                               QStringLiteral("%1 %").arg(100.0 * row.stats.hit_ratio(), 0, 'f', 2),
                               tokens_text(static_cast<int64_t>(row.stats.gpu_hit_tokens)),
                               tokens_text(static_cast<int64_t>(row.stats.cpu_hit_tokens))};
    for (int c = 0; c < cells.size(); ++c) table_->setItem(r, c, new QTableWidgetItem(cells[c]));
  }
  marginal_->setText(marginalText());
}

QString CapacityPanel::marginalText() const {
  if (study_.curve.empty()) return {};
  return tr("<b>One more GiB</b> (%1 tokens of %2 at %3 B/token) on a pool of %4 tokens: hit ratio %5 % → %6 % "
            "(<b>%7%8 points</b>).")
      .arg(tokens_text(study_.tokens_per_gib), geometry_->currentText())
      .arg(studyBytesPerToken_)
      .arg(tokens_text(studyPoolTokens_))
      .arg(100.0 * study_.hit_at_pool, 0, 'f', 2)
      .arg(100.0 * study_.hit_plus_gib, 0, 'f', 2)
      .arg(study_.marginal_per_gib() >= 0 ? QStringLiteral("+") : QString())
      .arg(100.0 * study_.marginal_per_gib(), 0, 'f', 2);
}

QString CapacityPanel::statusText() const { return status_->text(); }

void CapacityPanel::setStatus(const QString& s, bool error) {
  status_->setText(s);
  status_->setStyleSheet(error ? QStringLiteral("color: #c0392b;") : QString());
}

}  // namespace kvscope::ui
