#include "controls/settings_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QIntValidator>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QThread>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <algorithm>
#include <stdexcept>

#include "engine/config_validation.h"
#include "kv/baseline_reserve.h"
#include "kv/kv_layout.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

QLineEdit* int_edit(int lo, int hi, const QString& placeholder, QObject* parent) {
  auto* e = new QLineEdit;
  // The validator makes the field refuse anything that is not a whole number in range.
  e->setValidator(new QIntValidator(lo, hi, parent));
  e->setPlaceholderText(placeholder);
  return e;
}

}  // namespace

int default_gui_threads() { return std::max(1, QThread::idealThreadCount()); }

EngineConfig default_gui_config() {
  EngineConfig c;
  c.threads = default_gui_threads();
  // A pool small enough that one screen shows every block and a busy workload feels the
  // pressure (preemption); large models get the same block count, i.e. more memory.
  c.num_blocks = 256;
  return c;
}

SettingsPanel::SettingsPanel(QWidget* parent) : QWidget(parent) {
  model_ = new QLineEdit;
  model_->setPlaceholderText(tr("path to a .gguf file"));
  model_->setToolTip(tr("The GGUF model the engine runs. Changing it reloads the model on the engine thread."));
  // A long path scrolls out of the field at 1280 px: its tooltip always has the whole of it.
  connect(model_, &QLineEdit::textChanged, this, [this, tip = model_->toolTip()](const QString& t) {
    model_->setToolTip(t.isEmpty() ? tip : QStringLiteral("<b>%1</b><br>%2").arg(t.toHtmlEscaped(), tip));
  });
  auto* browse = new QPushButton(tr("Browse…"));
  recent_ = new QToolButton;
  recent_->setText(tr("Recent"));
  recent_->setPopupMode(QToolButton::InstantPopup);
  recent_->setMenu(new QMenu(recent_));
  auto* modelRow = new QGridLayout;
  modelRow->addWidget(model_, 0, 0, 1, 3);
  modelRow->addWidget(browse, 1, 1);
  modelRow->addWidget(recent_, 1, 2);
  modelRow->setColumnStretch(0, 1);

  blockSize_ = new QComboBox;
  for (int b : supported_block_sizes()) blockSize_->addItem(QString::number(b), b);
  blockSize_->setToolTip(
      tr("Tokens per KV block. Small blocks waste less in each sequence's last block; "
         "large blocks mean shorter block tables and fewer prefix-cache entries."));
  pool_ = int_edit(1, 10000000, tr("e.g. 1024"), this);
  pool_->setToolTip(tr("Size of the KV block pool, as a number of blocks or a memory budget in MiB."));
  poolUnit_ = new QComboBox;
  poolUnit_->addItem(tr("blocks"));
  poolUnit_->addItem(tr("MiB"));
  auto* poolRow = new QHBoxLayout;
  poolRow->addWidget(pool_, 1);
  poolRow->addWidget(poolUnit_);
  dtype_ = new QComboBox;
  dtype_->setObjectName(QStringLiteral("kvDtypeBox"));  // a lesson highlights it by name
  for (KvDtype d : kAllKvDtypes)
    dtype_->addItem(QString::fromLatin1(kv_dtype_name(d)), QString::fromLatin1(kv_dtype_name(d)));
  stateDtype_ = new QComboBox;
  for (StateDtype d : kAllStateDtypes)
    stateDtype_->addItem(QString::fromLatin1(state_dtype_name(d)), QString::fromLatin1(state_dtype_name(d)));
  stateDtype_->setToolTip(
      tr("Hybrid models only (LFM2, Qwen3.5, Granite 4.0-H): the element type of the fixed state each "
         "sequence holds in the recurrent layers, apart from the KV dtype. f16 and bf16 halve it and round it "
         "once per token; models without recurrent layers ignore it."));
  checkpoints_ = new QComboBox;
  checkpoints_->setEditable(true);  // every:N for any N
  for (const char* p : {"every:8", "every:4", "every-block", "prompt-end", "off"})
    checkpoints_->addItem(QString::fromLatin1(p));
  checkpoints_->setToolTip(
      tr("Hybrid models only: where prefix caching keeps copies of the recurrent state, since a hit can resume "
         "only from one: every:N blocks, every-block, prompt-end, or off (then no prefix-cache hits). Where a "
         "prompt leaves a cached prefix (a shared system prompt's end) is checkpointed whatever the policy."));
  checkpointMiB_ = int_edit(0, 1 << 20, tr("MiB"), this);
  checkpointMiB_->setToolTip(
      tr("Memory for the state checkpoints in MiB, least recently used out first; each one is a whole "
         "sequence's state."));
  auto* checkpointRow = new QHBoxLayout;
  checkpointRow->addWidget(checkpoints_, 1);
  checkpointRow->addWidget(checkpointMiB_);
  checkpointRow->addWidget(new QLabel(tr("MiB")));
  window_ = int_edit(0, 10000000, tr("0 = full attention"), this);
  window_->setToolTip(
      tr("Sliding window in tokens: attention sees only the last W positions and blocks that fall "
         "wholly outside the window are freed at once. 0 = full attention. With token eviction on, it is the "
         "eviction policy's recent window instead (every kept token stays visible)."));
  sinks_ = int_edit(0, 1000000, tr("0 = none"), this);
  sinks_->setToolTip(
      tr("Attention sinks (StreamingLLM): the first S tokens stay visible and stored forever, "
         "in addition to the window."));
  // Token eviction: one field taking the CLI's `--evict` spec (engine/evict_config.h's parser,
  // so the two can never disagree on what a spec means), checked as it is typed.
  evict_ = new QLineEdit;
  evict_->setObjectName(QStringLiteral("evictEdit"));
  evict_->setPlaceholderText(tr("off (e.g. h2o:20%)"));  // fits the narrow dock; the tooltip has the rest
  evict_->setToolTip(eviction_tooltip());
  prefix_ = new QCheckBox(tr("prefix caching"));
  prefix_->setToolTip(
      tr("Reuse the K/V of full blocks whose token prefix was computed before (vLLM-style hash chain)."));
  baseline_ = new QCheckBox(tr("contiguous baseline"));
  baseline_->setToolTip(
      tr("The traditional allocator instead of paging: every request reserves max-model-length "
         "contiguous slots up front (first-fit). Same model and scheduler, so the waste and "
         "fragmentation it shows are measured, not estimated."));
  // What the baseline reserves per request (kv/baseline_reserve.h): the item data is the text
  // parse_baseline_reserve() reads; "fixed" takes its N from the field next to it.
  reserve_ = new QComboBox;
  reserve_->addItem(tr("max model length"), QStringLiteral("max-model-len"));
  reserve_->setItemData(0,
                        tr("Every request reserves the max model length: huge internal waste, but equal sizes "
                           "never fragment."),
                        Qt::ToolTipRole);
  reserve_->addItem(tr("request's own max"), QStringLiteral("request"));
  reserve_->setItemData(1,
                        tr("Each request reserves prompt + max tokens: less waste, but holes open between live "
                           "reservations (external fragmentation)."),
                        Qt::ToolTipRole);
  reserve_->addItem(tr("fixed guess"), QStringLiteral("fixed"));
  reserve_->setItemData(2,
                        tr("Every request reserves a fixed number of tokens and grows in place, moves (its K/V "
                           "copied) or is preempted when it outgrows it."),
                        Qt::ToolTipRole);
  reserveGuess_ = int_edit(1, 1 << 24, tr("tokens"), this);
  reserveGuess_->setText(QStringLiteral("256"));
  reserveGuess_->setMaximumWidth(80);
  auto* reserveRow = new QWidget;
  auto* rl = new QHBoxLayout(reserveRow);
  rl->setContentsMargins(0, 0, 0, 0);
  rl->addWidget(reserve_, 1);
  rl->addWidget(reserveGuess_);
  auto syncReserve = [this] {
    reserve_->setEnabled(baseline_->isChecked());
    reserveGuess_->setEnabled(baseline_->isChecked() && reserve_->currentData().toString() == QLatin1String("fixed"));
  };
  connect(baseline_, &QCheckBox::toggled, this, syncReserve);
  connect(reserve_, &QComboBox::currentIndexChanged, this, syncReserve);
  syncReserve();
  backend_ = new QComboBox;
  backend_->addItem(tr("Auto"), backend_choice_key(BackendChoice::Auto));
  backend_->setItemData(0, tr("CUDA when this build has it and a device answers, else the CPU."), Qt::ToolTipRole);
  backend_->addItem(tr("CPU"), backend_choice_key(BackendChoice::Cpu));
  backend_->addItem(tr("CUDA"), backend_choice_key(BackendChoice::Cuda));
  backend_->setToolTip(
      tr("Where the model runs. Auto uses a CUDA GPU when this build has the CUDA backend and a device "
         "answers, and the CPU otherwise."));
  {
    QString why;
    const bool ok = cuda_usable(&why);
    backend_->setItemData(1, tr("The CPU backend (SIMD kernels, all cores but one)."), Qt::ToolTipRole);
    backend_->setItemData(2, ok ? tr("Run on the first CUDA device.") : tr("Not available here: %1.").arg(why),
                          Qt::ToolTipRole);
  }
  backendNote_ = new QLabel;
  backendNote_->setWordWrap(true);
  backendNote_->setStyleSheet(QStringLiteral("color:#c62828"));
  backendNote_->hide();
  auto* backendCol = new QVBoxLayout;
  backendCol->setContentsMargins(0, 0, 0, 0);
  backendCol->addWidget(backend_);
  backendCol->addWidget(backendNote_);
  maxRunning_ = new QSpinBox;
  maxRunning_->setRange(1, 4096);
  maxRunning_->setToolTip(tr("Most sequences the scheduler runs in one step (continuous batching)."));
  maxBatched_ = new QSpinBox;
  maxBatched_->setRange(1, 1 << 20);
  maxBatched_->setToolTip(
      tr("Token budget of one step; long prompts are prefilled in chunks of at most this many tokens."));
  maxLen_ = int_edit(0, 10000000, tr("0 = model's context"), this);
  maxLen_->setToolTip(tr("Longest sequence (prompt + reply) the engine accepts. 0 = the model's context length."));

  threads_ = new QSpinBox;
  threads_->setRange(1, std::max(64, QThread::idealThreadCount()));
  threads_->setToolTip(tr("CPU threads the backend computes a step with (this machine has %1). The window's own "
                          "drawing shares the cores; see the Threads measurement in docs/engine.md.")
                           .arg(QThread::idealThreadCount()));

  temp_ = new QDoubleSpinBox;
  temp_->setRange(0, 5);
  temp_->setSingleStep(0.1);
  repPen_ = new QDoubleSpinBox;
  repPen_->setRange(0.5, 2.0);
  repPen_->setSingleStep(0.05);
  repPen_->setToolTip(
      tr("Repetition penalty over the last 64 tokens (1 = off); 1.1 keeps a small model from looping."));
  topK_ = new QSpinBox;
  topK_->setRange(0, 100000);
  topP_ = new QDoubleSpinBox;
  topP_->setRange(0.01, 1.0);
  topP_->setSingleStep(0.05);
  maxTok_ = new QSpinBox;
  maxTok_->setRange(1, 32768);
  seed_ = new QSpinBox;
  seed_->setRange(0, 999999);

  auto* engineBox = new QGroupBox(tr("Engine (applying rebuilds it)"));
  auto* ef = new QFormLayout(engineBox);
  ef->addRow(tr("Model"), withNote(modelRow, {"model"}));
  ef->addRow(tr("Backend"), backendCol);
  ef->addRow(tr("Threads"), threads_);
  ef->addRow(tr("Block size"), withNote(blockSize_, {"block_size"}));
  ef->addRow(tr("KV pool"), withNote(poolRow, {"num_blocks", "kv_memory_bytes", "sliding_num_blocks"}));
  ef->addRow(tr("KV dtype"), withNote(dtype_, {"kv_dtype"}));
  ef->addRow(tr("Recurrent state"), withNote(stateDtype_, {"state_dtype"}));
  ef->addRow(tr("State checkpoints"), withNote(checkpointRow, {"state_checkpoints", "checkpoint_memory_bytes"}));
  ef->addRow(tr("Sliding window"), withNote(window_, {"window"}));
  ef->addRow(tr("Sinks"), withNote(sinks_, {"sinks"}));
  ef->addRow(tr("Token eviction"), withNote(evict_, {"evict"}));
  ef->addRow(QString(), prefix_);
  ef->addRow(QString(), withNote(baseline_, {"no_kv_cache", "hybrid_kv"}));
  ef->addRow(tr("Baseline reserves"), withNote(reserveRow, {"baseline_reserve"}));
  ef->addRow(tr("Max batch (seqs)"), withNote(maxRunning_, {"max_running"}));
  ef->addRow(tr("Max tokens / step"), withNote(maxBatched_, {"max_batched_tokens"}));
  ef->addRow(tr("Max model length"), withNote(maxLen_, {"max_model_len"}));

  auto* sampBox = new QGroupBox(tr("Sampling defaults (new chats)"));
  auto* sf = new QFormLayout(sampBox);
  sf->addRow(tr("Temperature"), temp_);
  sf->addRow(tr("Top-k"), topK_);
  sf->addRow(tr("Top-p"), topP_);
  sf->addRow(tr("Repetition penalty"), repPen_);
  sf->addRow(tr("Max new tokens"), maxTok_);
  sf->addRow(tr("Seed"), seed_);

  message_ = new QLabel;
  message_->setWordWrap(true);
  message_->setStyleSheet(QStringLiteral("color:#c62828"));
  apply_ = new QPushButton(tr("Apply"));
  apply_->setToolTip(tr("Rebuild the engine with these settings on its own thread (running requests are cancelled)."));
  auto* btnRow = new QHBoxLayout;
  btnRow->addWidget(message_, 1);
  btnRow->addWidget(apply_, 0, Qt::AlignTop);

  auto* content = new QWidget;
  auto* cv = new QVBoxLayout(content);
  cv->addWidget(engineBox);
  cv->addWidget(sampBox);
  cv->addLayout(btnRow);
  cv->addStretch(1);
  fill_with_scroll_area(this, content, /*wrapWidth=*/true);

  showConfig(default_gui_config());
  const SamplingParams sp = chat_sampling_defaults();  // as local-chat apps; greedy is one click in the chat
  temp_->setValue(sp.temperature);
  topK_->setValue(sp.top_k);
  topP_->setValue(sp.top_p);
  repPen_->setValue(sp.repetition_penalty);
  seed_->setValue(static_cast<int>(sp.seed));
  maxTok_->setValue(64);

  connect(checkpoints_, &QComboBox::editTextChanged, this, &SettingsPanel::revalidate);
  for (QLineEdit* e : {pool_, window_, sinks_, evict_, maxLen_, checkpointMiB_})
    connect(e, &QLineEdit::textChanged, this, &SettingsPanel::revalidate);
  connect(blockSize_, &QComboBox::currentIndexChanged, this, &SettingsPanel::revalidate);
  connect(blockSize_, &QComboBox::currentIndexChanged, this, &SettingsPanel::updateDtypeTooltips);
  connect(dtype_, &QComboBox::currentIndexChanged, this, &SettingsPanel::updateDtypeTooltips);
  connect(poolUnit_, &QComboBox::currentIndexChanged, this, &SettingsPanel::revalidate);
  connect(model_, &QLineEdit::textChanged, this, &SettingsPanel::revalidate);
  connect(baseline_, &QCheckBox::toggled, this, &SettingsPanel::revalidate);
  connect(reserve_, &QComboBox::currentIndexChanged, this, &SettingsPanel::revalidate);
  connect(reserveGuess_, &QLineEdit::textChanged, this, &SettingsPanel::revalidate);
  connect(backend_, &QComboBox::activated, this, [this](int i) {
    if (const auto c = parse_backend_choice(backend_->itemData(i).toString())) setBackendChoice(*c);
  });
  connect(browse, &QPushButton::clicked, this, &SettingsPanel::browseRequested);
  connect(apply_, &QPushButton::clicked, this, [this] {
    if (auto cfg = config()) {
      save();
      emit applyRequested(*cfg, modelPath());
    }
  });
  auto samplingChanged = [this] { emit samplingDefaultsChanged(samplingDefaults()); };
  connect(temp_, &QDoubleSpinBox::valueChanged, this, samplingChanged);
  connect(topP_, &QDoubleSpinBox::valueChanged, this, samplingChanged);
  connect(repPen_, &QDoubleSpinBox::valueChanged, this, samplingChanged);
  connect(topK_, &QSpinBox::valueChanged, this, samplingChanged);
  connect(maxTok_, &QSpinBox::valueChanged, this, samplingChanged);
  connect(seed_, &QSpinBox::valueChanged, this, samplingChanged);
  revalidate();
  updateDtypeTooltips();
}

void SettingsPanel::setModel(const ModelConfig& model, const KvShape& shape) {
  modelConfig_ = model;
  shape_ = shape;
  updateDtypeTooltips();
}

void SettingsPanel::updateDtypeTooltips() {
  const int bs = blockSize_->currentData().toInt();
  set_kv_dtype_tooltips(dtype_, shape_, bs);
  // The closed box shows the general rule and what the current choice costs.
  QString tip =
      tr("Element type of the stored keys and values: smaller types hold more tokens in the same memory "
         "(hover each entry of the list for its cost).");
  if (const auto d = parse_kv_dtype(dtype_->currentText().toStdString()))
    tip += QStringLiteral("<br><br>") + kv_dtype_tooltip(*d, shape_, bs);
  dtype_->setToolTip(tip);
}

BackendChoice SettingsPanel::backendChoice() const {
  return parse_backend_choice(backend_->itemData(backendIndex_).toString()).value_or(BackendChoice::Auto);
}

QString SettingsPanel::backendNote() const { return backendNote_->isHidden() ? QString() : backendNote_->text(); }

bool SettingsPanel::setBackendChoice(BackendChoice c) {
  const int i = backend_->findData(backend_choice_key(c));
  QString why;
  if (c == BackendChoice::Cuda && !cuda_usable(&why)) {
    // Refused here, with the reason, rather than when the engine is rebuilt.
    backend_->setCurrentIndex(backendIndex_);
    backendNote_->setText(tr("CUDA cannot be used: %1.").arg(why));
    backendNote_->show();
    return false;
  }
  backendIndex_ = std::max(0, i);
  backend_->setCurrentIndex(backendIndex_);
  backendNote_->clear();
  backendNote_->hide();
  return true;
}

QString SettingsPanel::modelPath() const { return model_->text().trimmed(); }
void SettingsPanel::setModelPath(const QString& path) { model_->setText(path); }

void SettingsPanel::showConfig(const EngineConfig& cfg) {
  blockSize_->setCurrentIndex(blockSize_->findData(cfg.block_size));
  if (cfg.num_blocks > 0) {
    poolUnit_->setCurrentIndex(0);
    pool_->setText(QString::number(cfg.num_blocks));
  } else {
    poolUnit_->setCurrentIndex(1);
    pool_->setText(QString::number(std::max<int64_t>(1, cfg.kv_memory_bytes >> 20)));
  }
  dtype_->setCurrentText(QString::fromLatin1(kv_dtype_name(cfg.kv_dtype)));
  stateDtype_->setCurrentText(QString::fromLatin1(state_dtype_name(cfg.state_dtype)));
  checkpoints_->setCurrentText(QString::fromStdString(checkpoint_policy_name(cfg.state_checkpoints)));
  checkpointMiB_->setText(QString::number(cfg.checkpoint_memory_bytes >> 20));
  window_->setText(QString::number(cfg.window));
  sinks_->setText(QString::number(cfg.sinks));
  evict_->setText(cfg.evict.on() ? QString::fromStdString(describe_evict(cfg.evict)) : QString());
  prefix_->setChecked(cfg.prefix_caching);
  if (cfg.threads > 0) threads_->setValue(cfg.threads);
  baseline_->setChecked(cfg.contiguous_baseline);
  const bool fixed = cfg.baseline_reserve.kind == BaselineReserveKind::Fixed;
  reserve_->setCurrentIndex(reserve_->findData(
      fixed ? QStringLiteral("fixed") : QString::fromStdString(baseline_reserve_name(cfg.baseline_reserve))));
  if (fixed) reserveGuess_->setText(QString::number(cfg.baseline_reserve.fixed_slots));
  maxRunning_->setValue(cfg.sched.max_running);
  maxBatched_->setValue(cfg.sched.max_batched_tokens);
  maxLen_->setText(QString::number(cfg.sched.max_model_len));
}

QString SettingsPanel::validationMessage() const {
  QString why;
  config(&why);
  return why;
}

QWidget* SettingsPanel::withNote(QLayout* field, std::initializer_list<const char*> names) {
  auto* w = new QWidget;
  field->setContentsMargins(0, 0, 0, 0);
  w->setLayout(field);
  return withNote(w, names);
}

QWidget* SettingsPanel::withNote(QWidget* field, std::initializer_list<const char*> names) {
  auto* note = new QLabel;
  note->setWordWrap(true);
  note->setStyleSheet(QStringLiteral("color:#c62828"));
  note->hide();
  for (const char* n : names) notes_[QLatin1String(n)] = note;
  auto* box = new QWidget;
  auto* col = new QVBoxLayout(box);
  col->setContentsMargins(0, 0, 0, 0);
  col->setSpacing(1);
  col->addWidget(field);
  col->addWidget(note);
  return box;
}

QString SettingsPanel::fieldNote(const QString& field) const {
  const auto it = notes_.find(field);
  return it == notes_.end() || it->second->isHidden() ? QString() : it->second->text();
}

std::optional<EngineConfig> SettingsPanel::config(QString* why) const {
  EngineConfig cfg;
  std::vector<Problem> found;
  read(&cfg, &found);
  if (why) *why = found.empty() ? QString() : found.front().message;
  if (!found.empty()) return std::nullopt;
  return cfg;
}

std::vector<SettingsPanel::Problem> SettingsPanel::problems() const {
  EngineConfig cfg;
  std::vector<Problem> found;
  read(&cfg, &found);
  return found;
}

void SettingsPanel::read(EngineConfig* out, std::vector<Problem>* problems) const {
  auto problem = [problems](const char* field, const QString& msg) {
    problems->push_back({QLatin1String(field), msg});
  };
  if (modelPath().isEmpty())
    problem("model", tr("Choose a model file."));
  else if (!QFileInfo(modelPath()).isFile())
    problem("model", tr("Model file %1 does not exist.").arg(modelPath()));
  EngineConfig& cfg = *out;
  cfg.block_size = blockSize_->currentData().toInt();
  if (!pool_->hasAcceptableInput()) {
    problem("num_blocks", tr("KV pool: enter a whole number of %1 (at least 1).").arg(poolUnit_->currentText()));
  } else if (const qint64 pool = pool_->text().toLongLong(); poolUnit_->currentIndex() == 0) {
    cfg.num_blocks = static_cast<int32_t>(pool);
  } else {
    cfg.num_blocks = 0;
    cfg.kv_memory_bytes = pool << 20;
  }
  if (const auto dt = parse_kv_dtype(dtype_->currentText().toStdString()))
    cfg.kv_dtype = *dt;
  else
    problem("kv_dtype", tr("Unknown KV dtype %1.").arg(dtype_->currentText()));
  if (const auto st = parse_state_dtype(stateDtype_->currentText().toStdString()))
    cfg.state_dtype = *st;
  else
    problem("state_dtype", tr("Unknown state dtype %1.").arg(stateDtype_->currentText()));
  std::string why;
  if (!parse_checkpoint_policy(checkpoints_->currentText().trimmed().toStdString(), cfg.state_checkpoints, why))
    problem("state_checkpoints", tr("State checkpoints: %1.").arg(QString::fromStdString(why)));
  if (checkpointMiB_->hasAcceptableInput())
    cfg.checkpoint_memory_bytes = checkpointMiB_->text().toLongLong() << 20;
  else
    problem("checkpoint_memory_bytes", tr("State checkpoints: enter a whole number of MiB (0 = none)."));
  const bool windowOk = window_->hasAcceptableInput(), sinksOk = sinks_->hasAcceptableInput();
  if (!windowOk) problem("window", tr("Sliding window: enter a whole number of tokens (0 = full attention)."));
  if (!sinksOk) problem("sinks", tr("Sinks: enter a whole number of tokens (0 = none)."));
  cfg.window = windowOk ? window_->text().toInt() : 0;
  cfg.sinks = sinksOk ? sinks_->text().toInt() : 0;
  try {
    cfg.evict = parse_evict(evict_->text().trimmed().toStdString());
  } catch (const std::invalid_argument& e) {
    // The parser's message names the bad part and gives examples; it starts with "--evict '...'".
    problem("evict",
            tr("Token eviction: %1.").arg(QString::fromStdString(e.what()).remove(QStringLiteral("--evict "))));
  }
  cfg.prefix_caching = prefix_->isChecked();
  cfg.threads = threads_->value();
  cfg.contiguous_baseline = baseline_->isChecked();
  if (cfg.contiguous_baseline) {
    const QString kind = reserve_->currentData().toString();
    if (kind == QLatin1String("fixed") && !reserveGuess_->hasAcceptableInput()) {
      problem("baseline_reserve", tr("Baseline fixed guess: enter a whole number of tokens, at least 1."));
    } else if (const auto r = parse_baseline_reserve(
                   (kind == QLatin1String("fixed") ? reserveGuess_->text() : kind).toStdString())) {
      cfg.baseline_reserve = *r;
    } else {
      problem("baseline_reserve", tr("Baseline reservation '%1' is not understood.").arg(kind));
    }
  }
  cfg.sched.max_running = maxRunning_->value();
  cfg.sched.max_batched_tokens = maxBatched_->value();
  if (maxLen_->hasAcceptableInput())
    cfg.sched.max_model_len = maxLen_->text().toInt();
  else
    problem("max_model_len", tr("Max model length: enter a whole number (0 = the model's context)."));
  // The rules between fields: the core's one rule book (engine/config_validation.h), advisory
  // problems refused too (an interactive user almost surely did not mean them). A field whose
  // text did not parse has its own problem already.
  for (const ConfigProblem& p : validate(cfg, modelConfig_)) {
    const QString field = QString::fromStdString(p.field);
    if (std::any_of(problems->begin(), problems->end(), [&](const Problem& q) { return q.field == field; })) continue;
    QString msg = QString::fromStdString(p.message);
    if (!msg.isEmpty()) msg[0] = msg[0].toUpper();
    problems->push_back({field, msg + QLatin1Char('.')});
  }
}

SamplingDefaults SettingsPanel::samplingDefaults() const {
  SamplingDefaults d;
  d.sampling.temperature = static_cast<float>(temp_->value());
  d.sampling.top_k = topK_->value();
  d.sampling.top_p = static_cast<float>(topP_->value());
  d.sampling.repetition_penalty = static_cast<float>(repPen_->value());
  d.sampling.seed = static_cast<uint64_t>(seed_->value());
  d.maxNewTokens = maxTok_->value();
  return d;
}

void SettingsPanel::revalidate() {
  const std::vector<Problem> found = problems();
  // Each problem beside its field; the first one also by the Apply button.
  std::map<QLabel*, QStringList> text;
  for (const auto& [field, note] : notes_) text[note];
  QStringList elsewhere;  // a field this panel does not show
  for (const Problem& p : found) {
    const auto it = notes_.find(p.field);
    if (it == notes_.end())
      elsewhere << p.message;
    else if (!text[it->second].contains(p.message))
      text[it->second] << p.message;
  }
  for (const auto& [note, lines] : text) {
    note->setText(lines.join(QLatin1Char('\n')));
    note->setVisible(!lines.isEmpty());
  }
  // By the Apply button: what has no field here, else how many notes there are to read.
  message_->setText(!elsewhere.isEmpty() ? elsewhere.join(QLatin1Char('\n'))
                    : found.empty()      ? QString()
                    : found.size() == 1  ? tr("1 setting to fix: see the note above.")
                                         : tr("%1 settings to fix: see the notes above.").arg(found.size()));
  apply_->setEnabled(found.empty());
}

}  // namespace kvscope::ui
