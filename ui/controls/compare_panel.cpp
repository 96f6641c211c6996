#include "controls/compare_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QScrollArea>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QIntValidator>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>
#include <stdexcept>

#include "panels/block_map_panel.h"
#include "engine/config_validation.h"
#include "kv/kv_layout.h"
#include "widgets/block_map_widget.h"
#include "panels/memory_panel.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

QString describe(const EngineConfig& c) {
  QString s = QObject::tr("block %1 · %2 · %3")
                  .arg(c.block_size)
                  .arg(QString::fromLatin1(kv_dtype_name(c.kv_dtype)))
                  .arg(c.num_blocks > 0 ? QObject::tr("%1 blocks").arg(c.num_blocks)
                                        : QObject::tr("%1 MiB").arg(c.kv_memory_bytes >> 20));
  // The baseline has no prefix cache whatever the flag says.
  if (c.contiguous_baseline)
    s = QObject::tr("CONTIGUOUS baseline (reserves %1) · ")
            .arg(QString::fromStdString(baseline_reserve_name(c.baseline_reserve))) +
        s;
  else
    s += QObject::tr(" · prefix cache %1").arg(c.prefix_caching ? QObject::tr("on") : QObject::tr("off"));
  if (c.window > 0) s += QObject::tr(" · window %1").arg(c.window);
  if (c.sinks > 0) s += QObject::tr(" · sinks %1").arg(c.sinks);
  if (c.evict.on()) s += QObject::tr(" · evict %1").arg(QString::fromStdString(describe_evict(c.evict)));
  if (!c.learned_sinks) s += QObject::tr(" · no learned sinks");
  return s;
}

// The configurations themselves head the two columns.
const QStringList kRows = {QObject::tr("requests done"),
                           QObject::tr("peak KV in use (MiB)"),
                           QObject::tr("peak waste %"),
                           QObject::tr("peak external frag. %"),
                           QObject::tr("peak concurrent requests"),
                           QObject::tr("prefix hit %"),
                           QObject::tr("mean TTFT (ms)"),
                           QObject::tr("tokens/s (run)"),
                           QObject::tr("preemptions"),
                           QObject::tr("rejected requests"),
                           QObject::tr("steps"),
                           QObject::tr("tokens evicted (holes now)"),
                           QObject::tr("blocks freed · compactions (MiB copied)"),
                           QObject::tr("perplexity (quality run)"),
                           QObject::tr("KL from A, mean (nats)"),
                           QObject::tr("top-1 agreement with A %")};

// Texts shipped for quality runs (resources/texts), from the source tree or next to the binary.
QStringList quality_texts() {
  QStringList dirs{QCoreApplication::applicationDirPath() + QStringLiteral("/../resources/texts"),
                   QCoreApplication::applicationDirPath() + QStringLiteral("/../share/kvscope/texts")};
#ifdef KVSCOPE_SOURCE_DIR
  dirs << QStringLiteral(KVSCOPE_SOURCE_DIR "/resources/texts");
#endif
  QStringList out;
  for (const QString& d : dirs)
    for (const QFileInfo& fi : QDir(d).entryInfoList({QStringLiteral("*.txt")}, QDir::Files, QDir::Name))
      if (!out.contains(fi.canonicalFilePath())) out << fi.canonicalFilePath();
  return out;
}

}  // namespace

ComparePanel::ComparePanel(const EngineSettingsSource* settings, QWidget* parent)
    : QWidget(parent), settings_(settings) {
  scenario_ = new QComboBox;
  for (const ScenarioEntry& e : scenario_entries()) scenario_->addItem(e.name, e.key);

  bBlock_ = new QComboBox;
  bBlock_->addItem(tr("same as A"), 0);
  for (int b : supported_block_sizes()) bBlock_->addItem(QString::number(b), b);
  bDtype_ = new QComboBox;
  bDtype_->addItem(tr("same as A"), QString());
  for (KvDtype d : kAllKvDtypes)
    bDtype_->addItem(QString::fromLatin1(kv_dtype_name(d)), QString::fromLatin1(kv_dtype_name(d)));
  bDtype_->setToolTip(tr("B's element type of the stored keys and values (hover each entry for its bytes per token)."));
  set_kv_dtype_tooltips(bDtype_, KvShape{}, 0);
  bPrefix_ = new QCheckBox(tr("flip prefix caching"));
  bLearned_ = new QCheckBox(tr("drop learned sinks"));
  bLearned_->setObjectName(QStringLiteral("learnedSinksB"));
  bLearned_->setToolTip(
      tr("gpt-oss's trained sink logits (one per head, attn_sinks) left out of B's softmax. They are weights, "
         "not cached tokens: B's KV memory stays the same, only its outputs change. Compare with StreamingLLM's "
         "sink tokens (the Sinks field), which are cached positions. No effect on a model without them."));
  bAlloc_ = new QComboBox;
  bAlloc_->addItem(tr("same as A"), 0);
  bAlloc_->addItem(tr("paged"), 1);
  bAlloc_->addItem(tr("contiguous baseline"), 2);
  bAlloc_->addItem(tr("contiguous, request's own max"), 3);
  bAlloc_->setToolTip(
      tr("The contiguous baseline reserves max-model-length slots per request up front, as "
         "pre-paging servers did: compare its waste and concurrency with paging. The request's "
         "own max (prompt + max tokens) wastes less but fragments: holes too short for the next "
         "request."));
  bWindow_ = new QLineEdit;
  bWindow_->setValidator(new QIntValidator(0, 10000000, this));
  bWindow_->setPlaceholderText(tr("same as A"));
  bSinks_ = new QLineEdit;
  bSinks_->setValidator(new QIntValidator(0, 1000000, this));
  bSinks_->setPlaceholderText(tr("same as A"));
  bPool_ = new QLineEdit;
  bPool_->setValidator(new QIntValidator(2, 10000000, this));
  bPool_->setPlaceholderText(tr("same as A (blocks)"));
  bEvict_ = new QLineEdit;
  bEvict_->setObjectName(QStringLiteral("evictB"));
  bEvict_->setPlaceholderText(tr("same as A"));
  bEvict_->setToolTip(
      tr("B's token eviction: a spec such as h2o:20% or snapkv:256, or off; empty keeps A's. It applies "
         "to the scenario and to the quality run (there SnapKV chooses once half the text is in).<br><br>") +
      eviction_tooltip());

  // One compact band of controls: B's differences from A, the scenario, and Run.
  auto* bBox = new QGroupBox(tr("Configuration B = A (the Settings panel) with:"));
  auto* grid = new QGridLayout(bBox);
  auto addField = [grid](int row, int col, const QString& label, QWidget* w) {
    grid->addWidget(new QLabel(label), row, col * 2);
    grid->addWidget(w, row, col * 2 + 1);
  };
  addField(0, 0, tr("Block size"), bBlock_);
  addField(0, 1, tr("KV dtype"), bDtype_);
  addField(0, 2, tr("Pool (blocks)"), bPool_);
  addField(1, 0, tr("Window"), bWindow_);
  addField(1, 1, tr("Sinks"), bSinks_);
  addField(1, 2, tr("Allocator"), bAlloc_);
  grid->addWidget(bPrefix_, 2, 0);
  grid->addWidget(bLearned_, 2, 1, 1, 3);
  addField(2, 2, tr("Eviction"), bEvict_);

  run_ = new QPushButton(tr("Run both"));
  run_->setToolTip(tr("Build two engines (A and B) on their own threads and run the chosen scenario on both."));
  status_ = new QLabel;
  status_->setWordWrap(true);
  quality_ = new QCheckBox(tr("then a quality run on"));
  quality_->setToolTip(
      tr("After the scenario, each side scores the same text teacher-forced with its KV settings "
         "(dtype, window, sinks, block size, token eviction) on its own thread: perplexity, and the KL divergence "
         "and top-1 agreement of B's next-token distributions against A's."));
  qualityText_ = new QComboBox;
  qualityText_->setEditable(true);
  qualityText_->setInsertPolicy(QComboBox::NoInsert);
  for (const QString& t : quality_texts()) qualityText_->addItem(QFileInfo(t).fileName(), t);
  qualityText_->setToolTip(tr("A shipped text, or type the path of any UTF-8 text file."));
  qualityTokens_ = new QSpinBox;
  qualityTokens_->setRange(2, 1 << 20);
  qualityTokens_->setValue(512);
  qualityTokens_->setSuffix(tr(" tok"));
  qualityTokens_->setToolTip(tr("Score at most this many tokens of the text (BOS included)."));
  auto* qualityRow = new QHBoxLayout;
  qualityRow->addWidget(quality_);
  qualityRow->addWidget(qualityText_, 1);
  qualityRow->addWidget(qualityTokens_);
  auto* runBox = new QGridLayout;
  runBox->addWidget(new QLabel(tr("Scenario")), 0, 0);
  runBox->addWidget(scenario_, 0, 1);
  runBox->addWidget(run_, 0, 2);
  runBox->addLayout(qualityRow, 1, 0, 1, 3);
  runBox->addWidget(status_, 2, 0, 1, 3);

  auto* top = new QHBoxLayout;
  top->addWidget(bBox, 3);
  top->addLayout(runBox, 2);

  auto* sideBySide = new QSplitter(Qt::Horizontal);
  for (int i = 0; i < 2; ++i) {
    Side& s = sides_[static_cast<size_t>(i)];
    auto* col = new QWidget;
    auto* cv = new QVBoxLayout(col);
    cv->setContentsMargins(0, 0, 0, 0);
    s.title = new QLabel(i == 0 ? tr("<b>A</b>") : tr("<b>B</b>"));
    s.title->setWordWrap(true);
    s.map = new BlockMapPanel;
    s.map->setCompact(true);
    s.map->map()->setCellSize(10);
    s.memory = new MemoryPanel;
    auto* vsplit = new QSplitter(Qt::Vertical);
    vsplit->addWidget(s.map);
    vsplit->addWidget(s.memory);
    cv->addWidget(s.title);
    cv->addWidget(vsplit, 1);
    sideBySide->addWidget(col);
  }
  // Synchronized time axes: panning one plot pans the other.
  connect(sides_[0].memory, &MemoryPanel::xRangeChanged, sides_[1].memory, &MemoryPanel::setXRange);
  connect(sides_[1].memory, &MemoryPanel::xRangeChanged, sides_[0].memory, &MemoryPanel::setXRange);

  table_ = new QTableWidget(kRows.size(), 2);
  table_->setHorizontalHeaderLabels({tr("A"), tr("B")});
  table_->setVerticalHeaderLabels(kRows);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setMinimumHeight(200);
  table_->verticalHeader()->setDefaultSectionSize(20);

  // The side-by-side view needs room: inside a narrow dock it scrolls; floated or maximised it fits.
  // Only the height is fixed: the width comes from the layout (never below 900), so no label of
  // the controls band is squeezed below its text when the dock is narrow: it scrolls instead.
  auto* content = new QWidget;
  content->setMinimumHeight(640);
  auto* v = new QVBoxLayout(content);
  v->setContentsMargins(4, 4, 4, 4);
  v->addStrut(900);
  v->addLayout(top);
  auto* main = new QSplitter(Qt::Vertical);
  main->addWidget(sideBySide);
  main->addWidget(table_);
  main->setStretchFactor(0, 1);
  main->setStretchFactor(1, 1);
  main->setSizes({320, 400});  // the table shows all its rows at 1280x800
  v->addWidget(main, 1);
  fill_with_scroll_area(this, content);

  connect(run_, &QPushButton::clicked, this, [this] {
    QString why;
    if (!start(scenario_->currentData().toString(), &why))
      status_->setText(QStringLiteral("<span style='color:#c62828'>%1</span>").arg(why.toHtmlEscaped()));
  });
  refreshTable();
}

ComparePanel::~ComparePanel() { shutdown(); }

void ComparePanel::shutdown() {
  for (Side& s : sides_)
    if (s.host) s.host->shutdown();
  if (agreementThread_) agreementThread_->wait();
}

void ComparePanel::presetB(const EngineConfigEdit& b, std::optional<bool> quality) {
  if (b.kvDtype)
    bDtype_->setCurrentIndex(std::max(0, bDtype_->findData(QString::fromLatin1(kv_dtype_name(*b.kvDtype)))));
  if (b.window) bWindow_->setText(QString::number(*b.window));
  if (b.sinks) bSinks_->setText(QString::number(*b.sinks));
  if (quality) quality_->setChecked(*quality);
}

void ComparePanel::setKvShape(const KvShape& shape, int blockSize) { set_kv_dtype_tooltips(bDtype_, shape, blockSize); }

std::optional<EngineConfig> ComparePanel::configB(const EngineConfig& a, QString* why) const {
  EngineConfig b = a;
  if (const int bs = bBlock_->currentData().toInt(); bs > 0) b.block_size = bs;
  if (const QString d = bDtype_->currentData().toString(); !d.isEmpty()) b.kv_dtype = *parse_kv_dtype(d.toStdString());
  if (!bWindow_->text().isEmpty()) b.window = bWindow_->text().toInt();
  if (!bSinks_->text().isEmpty()) b.sinks = bSinks_->text().toInt();
  if (!bPool_->text().isEmpty()) {
    if (!bPool_->hasAcceptableInput()) {
      *why = tr("B's pool must be at least 2 blocks.");
      return std::nullopt;
    }
    b.num_blocks = bPool_->text().toInt();
  }
  if (const QString spec = bEvict_->text().trimmed(); !spec.isEmpty()) {
    try {
      b.evict = parse_evict(spec.toStdString());
    } catch (const std::invalid_argument& e) {
      *why = tr("B's token eviction: %1.").arg(QString::fromStdString(e.what()).remove(QStringLiteral("--evict ")));
      return std::nullopt;
    }
  }
  if (bPrefix_->isChecked()) b.prefix_caching = !a.prefix_caching;
  if (bLearned_->isChecked()) b.learned_sinks = false;
  if (const int alloc = bAlloc_->currentData().toInt(); alloc > 0) {
    b.contiguous_baseline = alloc >= 2;
    if (alloc == 3) b.baseline_reserve.kind = BaselineReserveKind::Request;
  }
  // The rules the Settings panel applies to A (core validate(), advisory problems refused too).
  if (const std::vector<ConfigProblem> p = validate(b, settings_->modelConfig()); !p.empty()) {
    *why = tr("B: %1.").arg(QString::fromStdString(p.front().message));
    return std::nullopt;
  }
  return b;
}

void ComparePanel::resetSide(Side& s, const EngineConfig& cfg, const QString& name) {
  if (!s.host) {
    // Each side gets one compute thread: the two engines share the machine fairly.
    s.host = std::make_unique<EngineHost>(nullptr, 1);
    EngineHost* h = s.host.get();
    Side* sp = &s;
    connect(h, &EngineHost::snapshot, this, [this, sp](const SnapshotPtr& snap, const EventBatch& ev) {
      sp->last = snap;
      sp->map->showSnapshot(snap, ev);
      sp->memory->showSnapshot(snap, ev);
      const double end = std::max(sides_[0].memory->lastTime(), sides_[1].memory->lastTime());
      for (Side& other : sides_) other.memory->setSharedEnd(end);
      // Reserved slots, not touched blocks: the baseline's reservation is memory in use too.
      sp->peakUsedBytes = std::max(sp->peakUsedBytes,
                                   static_cast<double>(snap->memory.slots_reserved) * snap->memory.kv_bytes_per_token);
      if (snap->memory.slots_reserved) sp->peakWaste = std::max(sp->peakWaste, snap->memory.waste_pct);
      sp->peakExtFrag = std::max(sp->peakExtFrag, 100.0 * snap->allocator.external_fragmentation);
      sp->peakRunning = std::max(sp->peakRunning, snap->running);
      refreshTable();
    });
    connect(h, &EngineHost::modelLoaded, this, [this, sp](const ModelInfo& info) {
      sp->loaded = true;
      sp->map->setVocab(info.vocab);
      sp->memory->clear();
      maybeRunScenario();
    });
    connect(h, &EngineHost::error, this, [this, name](const QString& msg) {
      status_->setText(QStringLiteral("<span style='color:#c62828'>%1: %2</span>").arg(name, msg.toHtmlEscaped()));
    });
    connect(h->worker(), &EngineThreadWorker::workloadProgress, this, [this, sp](int done, int total) {
      sp->done = done;
      sp->total = total;
      if (total > 0 && done >= total) maybeStartQuality(*sp);
      refreshTable();
    });
    connect(h->worker(), &EngineThreadWorker::qualityProgress, this, [this, sp](quint64 tag, int done, int total) {
      if (tag != sp->qualityTag) return;  // a run this panel has since replaced
      sp->qualityDone = done;
      sp->qualityTotal = total;
      refreshTable();
    });
    connect(h->worker(), &EngineThreadWorker::qualityFinished, this, [this, sp](const QualityResult& r) {
      if (r.tag != sp->qualityTag) return;
      sp->quality = r;
      if (!r.error.isEmpty())
        status_->setText(QStringLiteral("<span style='color:#c62828'>%1</span>")
                             .arg(tr("Quality run failed: %1").arg(r.error).toHtmlEscaped()));
      maybeCompareQuality();
      refreshTable();
    });
    connect(h->worker(), &EngineThreadWorker::requestFinished, this, [sp](const TurnStats& t) {
      if (t.ttftMs >= 0) {
        sp->ttftSum += t.ttftMs;
        ++sp->ttftN;
      }
      sp->generated += t.generated;
    });
  }
  s.host->setStepDelay(stepDelayMs_);
  s.cfg = cfg;
  s.loaded = false;
  s.done = s.total = 0;
  s.peakUsedBytes = s.peakWaste = s.ttftSum = s.peakExtFrag = 0;
  s.peakRunning = 0;
  s.ttftN = s.generated = 0;
  s.last.reset();
  s.qualityWanted = quality_->isChecked();
  s.qualityStarted = false;
  s.qualityTag = 0;
  s.qualityDone = s.qualityTotal = 0;
  s.quality.reset();
  s.title->setText(tr("<b>%1</b> — %2").arg(name, describe(cfg).toHtmlEscaped()));
}

bool ComparePanel::start(const QString& scenario, QString* why) {
  QString err;
  auto a = settings_->config(&err);
  if (!a) {
    if (why) *why = tr("Configuration A (Settings panel) is invalid: %1").arg(err);
    return false;
  }
  auto b = configB(*a, &err);
  if (!b) {
    if (why) *why = err;
    return false;
  }
  try {
    int idx = scenario_->findData(scenario);
    if (idx < 0) idx = scenario_->findText(scenario);
    if (idx >= 0) scenario_->setCurrentIndex(idx);
    pending_ = load_scenario(idx >= 0 ? scenario_->itemData(idx).toString() : scenario);
  } catch (const std::exception& e) {
    if (why) *why = QString::fromUtf8(e.what());
    return false;
  }
  if (quality_->isChecked()) {
    // The text is read once here: both sides must score exactly the same one.
    const QString path = qualityText_->currentIndex() >= 0 &&
                                 qualityText_->currentText() == qualityText_->itemText(qualityText_->currentIndex())
                             ? qualityText_->currentData().toString()
                             : qualityText_->currentText().trimmed();
    QFile f(path);
    if (path.isEmpty() || !f.open(QIODevice::ReadOnly)) {
      if (why) *why = tr("Quality run: cannot read the text file “%1”.").arg(path);
      return false;
    }
    qualityBody_ = QString::fromUtf8(f.readAll()).trimmed();
    if (qualityBody_.isEmpty()) {
      if (why) *why = tr("Quality run: “%1” is empty.").arg(path);
      return false;
    }
  }
  agreement_.reset();
  agreementError_.clear();
  resetSide(sides_[0], *a, tr("A"));
  resetSide(sides_[1], *b, tr("B"));
  for (Side& s : sides_) s.host->loadModel(settings_->modelPath(), s.cfg);
  status_->setText(tr("Loading both engines…"));
  refreshTable();
  return true;
}

void ComparePanel::maybeRunScenario() {
  if (!pending_ || !sides_[0].loaded || !sides_[1].loaded) return;
  for (Side& s : sides_) s.host->runWorkload(*pending_);
  status_->setText(tr("Running “%1” on A and B.").arg(QString::fromStdString(pending_->name)));
  pending_.reset();
}

void ComparePanel::maybeStartQuality(Side& s) {
  if (!s.qualityWanted || s.qualityStarted || !s.host) return;
  s.qualityStarted = true;
  s.qualityTag = s.host->evaluateText(qualityBody_, qualityTokens_->value());
  status_->setText(tr("Scenario done; scoring the text for the quality run…"));
}

void ComparePanel::maybeCompareQuality() {
  const auto& qa = sides_[0].quality;
  const auto& qb = sides_[1].quality;
  if (!qa || !qb || agreementThread_) return;
  if (!qa->error.isEmpty() || !qb->error.isEmpty() || !qa->logits || !qb->logits) {
    agreementError_ = tr("no comparison: a quality run failed");
    return;
  }
  // KL over every position and the whole vocabulary: off the UI thread (a large model's logits
  // are millions of values), then back here through the queued finished() connection.
  auto out = std::make_shared<std::optional<LogitsAgreement>>();
  auto err = std::make_shared<QString>();
  QThread* t = QThread::create([a = qa->logits, b = qb->logits, out, err] {
    try {
      *out = compare_logits(*a, *b);
    } catch (const std::exception& e) { *err = QString::fromUtf8(e.what()); }
  });
  t->setParent(this);  // never outlives the panel (shutdown() waits for it first)
  agreementThread_ = t;
  connect(t, &QThread::finished, this, [this, t, out, err] {
    agreement_ = *out;
    agreementError_ = *err;
    t->deleteLater();
    status_->setText(agreement_ ? tr("Done: scenario and quality run on A and B.")
                                : tr("Quality comparison failed: %1").arg(*err));
    refreshTable();
  });
  t->start();
}

QString ComparePanel::qualityCell(const Side& s) const {
  if (!s.qualityWanted) return QStringLiteral("—");
  if (s.quality) {
    if (!s.quality->error.isEmpty()) return tr("failed: %1").arg(s.quality->error);
    if (s.cfg.evict.on())  // the quality run evicts too: say how much of the text it dropped
      return tr("%1 (%2 tokens, %3 evicted)")
          .arg(s.quality->perplexity, 0, 'f', 4)
          .arg(s.quality->nTokens)
          .arg(s.quality->tokensEvicted);
    return tr("%1 (%2 tokens)").arg(s.quality->perplexity, 0, 'f', 4).arg(s.quality->nTokens);
  }
  if (!s.qualityStarted) return tr("after the scenario");
  return s.qualityTotal > 0 ? tr("scoring… %1%").arg(100 * s.qualityDone / s.qualityTotal) : tr("scoring…");
}

void ComparePanel::setStepDelay(int ms) {
  stepDelayMs_ = ms;
  for (Side& s : sides_)
    if (s.host) s.host->setStepDelay(ms);
}

int ComparePanel::progressPercent() const {
  int pct = 100;
  for (const Side& s : sides_) pct = std::min(pct, s.total > 0 ? 100 * s.done / s.total : 0);
  return pct;
}

bool ComparePanel::finished() const {
  for (const Side& s : sides_) {
    if (!s.host || s.total == 0 || s.done < s.total) return false;
    if (s.qualityWanted && !s.quality) return false;
  }
  // With a quality run, finished once the comparison is in (or could not be made).
  if (sides_[0].qualityWanted && !agreement_ && agreementError_.isEmpty()) return false;
  return true;
}

void ComparePanel::refreshTable() {
  QStringList heads;
  for (int c = 0; c < 2; ++c) {
    const Side& s = sides_[static_cast<size_t>(c)];
    const QString name = c == 0 ? tr("A") : tr("B");
    heads << (s.host ? QStringLiteral("%1: %2").arg(name, describe(s.cfg)) : name);
  }
  for (int c = 0; c < 2; ++c)
    if (!table_->horizontalHeaderItem(c) || table_->horizontalHeaderItem(c)->text() != heads[c])
      table_->setHorizontalHeaderItem(c, new QTableWidgetItem(heads[c]));
  for (int c = 0; c < 2; ++c) {
    const Side& s = sides_[static_cast<size_t>(c)];
    QStringList vals;
    if (!s.host) {
      for (int r = 0; r < kRows.size(); ++r) vals << QStringLiteral("—");
    } else {
      const Snapshot* snap = s.last.get();
      const double hit = snap && snap->counters.prefix_queries_tokens
                             ? 100.0 * snap->counters.prefix_hits_tokens / snap->counters.prefix_queries_tokens
                             : 0.0;
      const double tps = snap && snap->elapsed_s > 0 ? s.generated / snap->elapsed_s : 0.0;
      vals << QStringLiteral("%1 / %2").arg(s.done).arg(s.total) << QString::number(s.peakUsedBytes / (1 << 20), 'f', 3)
           << QString::number(s.peakWaste, 'f', 1) << QString::number(s.peakExtFrag, 'f', 1)
           << QString::number(s.peakRunning) << QString::number(hit, 'f', 1)
           << (s.ttftN ? QString::number(s.ttftSum / s.ttftN, 'f', 2) : QStringLiteral("—"))
           << QString::number(tps, 'f', 0) << (snap ? QString::number(snap->counters.preemptions) : QStringLiteral("—"))
           << (snap ? QString::number(snap->counters.requests_rejected) : QStringLiteral("—"))
           << (snap ? QString::number(snap->step) : QStringLiteral("—"));
      if (!s.cfg.evict.on()) {
        vals << tr("off") << tr("off");
      } else if (!snap) {
        vals << QStringLiteral("—") << QStringLiteral("—");
      } else {
        const EvictionSnap& e = snap->eviction;
        vals << (e.tokens_hidden > 0
                     ? tr("%1 (%2 holes) · %3 hidden per layer").arg(e.tokens_evicted).arg(e.holes).arg(e.tokens_hidden)
                     : tr("%1 (%2 holes)").arg(e.tokens_evicted).arg(e.holes))
             << tr("%1 · %2 (%3)")
                    .arg(e.blocks_freed)
                    .arg(e.compactions)
                    .arg(static_cast<double>(e.bytes_copied) / (1 << 20), 0, 'f', 3);
      }
      vals << qualityCell(s);
      if (!s.qualityWanted)
        vals << QStringLiteral("—") << QStringLiteral("—");
      else if (c == 0)
        vals << tr("0 (reference)") << tr("100 (reference)");
      else if (agreement_)
        vals << QString::number(agreement_->kl_mean, 'g', 4) << QString::number(100.0 * agreement_->top1, 'f', 2);
      else if (!agreementError_.isEmpty())
        vals << agreementError_ << agreementError_;
      else
        vals << QStringLiteral("…") << QStringLiteral("…");
    }
    for (int r = 0; r < vals.size(); ++r) {
      auto* item = table_->item(r, c);
      if (!item) table_->setItem(r, c, item = new QTableWidgetItem);
      item->setText(vals[r]);
    }
  }
}

}  // namespace kvscope::ui
