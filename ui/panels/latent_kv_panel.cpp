#include "panels/latent_kv_panel.h"

#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>

#include "widgets/live_label.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

QString fmt(qint64 n) { return QLocale(QLocale::English).toString(n); }

// Both models: 256 wide, 4 layers, 8 query heads of 32; they differ in what attention caches.
SyntheticSpec spec_for(int run) {
  SyntheticSpec s;
  s.n_vocab = 512;
  s.n_embd = 256;
  s.n_layer = 4;
  s.n_head = 8;
  s.n_ff = 512;
  s.n_ctx = 1024;
  s.seed = 7;
  if (run == LatentKvPanel::Latent) {
    s.arch = "deepseek2";  // one row of 64 latent + 16 RoPE values; MoE after the first layer
    s.kv_lora_rank = 64;
    s.q_lora_rank = 64;
    s.mla_rope = 16;
    s.n_expert = 4;
    s.n_expert_used = 2;
  } else {
    s.arch = "llama";  // 4 KV heads of 32 for the 8 query heads: K and V per KV head
    s.n_head_kv = 4;
  }
  return s;
}

// What one token caches per layer, and the formula, from the loaded model's own config.
QString formula(const ModelConfig& c) {
  if (c.latent_kv())
    return QObject::tr(
               "1 row × (%1 latent + %2 RoPE key) × 2 B × %3 layers: the row is every head's key, its "
               "latent part every head's value")
        .arg(c.mla.kv_lora_rank)
        .arg(c.rope_dim)
        .arg(c.n_layer);
  return QObject::tr("2 (K and V) × %1 KV heads × %2 × 2 B × %3 layers")
      .arg(c.n_head_kv)
      .arg(c.head_dim)
      .arg(c.n_layer);
}

}  // namespace

LatentKvPanel::LatentKvPanel(QWidget* parent) : QWidget(parent) {
  pair_ = new SyntheticPair(
      {SyntheticPair::Side{tr("latent"), QStringLiteral("latent-mla.gguf"), spec_for(Latent)},
       SyntheticPair::Side{tr("GQA"), QStringLiteral("gqa.gguf"), spec_for(Gqa)}},
      [this](int i, EngineHost& host, const ModelInfo&) {
        return host.submitText(prompt_->text(), tokens_->value(), true, pair_->name(i));
      },
      this);
  connect(pair_, &SyntheticPair::loaded, this, &LatentKvPanel::onLoaded);
  connect(pair_, &SyntheticPair::snapshot, this, &LatentKvPanel::onSnapshot);
  connect(pair_, &SyntheticPair::stopped, this, [this] {
    updateStatus();
    emit runFinished();
  });
  prompt_ = new QLineEdit(
      QStringLiteral("A latent cache keeps one compressed row per token, and every head reads it as key and value."));
  prompt_->setToolTip(tr("The prompt both models read (their weights are random: the text they write is not)."));
  tokens_ = new QSpinBox;
  tokens_->setRange(1, 200);
  tokens_->setValue(32);
  tokens_->setToolTip(tr("Tokens each model generates after the prompt."));
  run_ = new QPushButton(tr("Run both"));
  run_->setToolTip(tr("Write the two synthetic models, give each a KV pool of %1 KiB (f16, 16-token blocks) and "
                      "run the prompt on both.")
                       .arg(kBudgetBytes >> 10));
  status_ = new LiveLabel;
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Prompt")));
  controls->addWidget(prompt_, 1);
  controls->addWidget(new QLabel(tr("New tokens")));
  controls->addWidget(tokens_);
  controls->addWidget(run_);

  auto* grid = new QGridLayout;
  const QStringList rows = {tr("Model"),
                            tr("Cached per token"),
                            tr("KV bytes per token"),
                            tr("Pool of %1 KiB").arg(kBudgetBytes >> 10),
                            tr("The run fills"),
                            tr("KV in use")};
  const QStringList heads = {tr("<b>Latent attention (MLA, deepseek2)</b>"),
                             tr("<b>Grouped-query attention (GQA, llama)</b>")};
  for (int i = 0; i < 2; ++i) grid->addWidget(new QLabel(heads[i]), 0, i + 1);
  for (int r = 0; r < kRows; ++r) {
    grid->addWidget(new QLabel(rows[r]), r + 1, 0, Qt::AlignTop);
    for (int i = 0; i < 2; ++i) {
      auto* l = new QLabel(QStringLiteral("–"));
      l->setWordWrap(true);
      l->setTextInteractionFlags(Qt::TextSelectableByMouse);
      l->setObjectName(QStringLiteral("latentCell%1_%2").arg(i).arg(r));
      cells_[static_cast<size_t>(i)][static_cast<size_t>(r)] = l;
      grid->addWidget(l, r + 1, i + 1, Qt::AlignTop);
    }
  }
  grid->setColumnStretch(1, 1);
  grid->setColumnStretch(2, 1);
  auto* caption = new QLabel(
      tr("<b>Why:</b> a multi-head model caches a key and a value per KV head; DeepSeek's latent attention caches "
         "one compressed row per token and turns each head's query into that latent space instead (its k_b "
         "matrix), so the cache no longer grows with the heads. DeepSeek-V3: 61 layers × (512 + 64) × 2 B = "
         "68.6 KiB per token, where its 128 heads cached as keys and values would take 4.8 MiB (the KV "
         "calculator's DeepSeek-V3 preset, its two columns). Blocks hold tokens, "
         "so the same prompt fills the same number of blocks in both pools: the same memory holds more of "
         "them."));
  caption->setWordWrap(true);

  auto* content = new QWidget;
  content->setMinimumSize(560, 360);
  auto* v = new QVBoxLayout(content);
  v->setContentsMargins(4, 4, 4, 4);
  v->addLayout(controls);
  v->addWidget(status_);
  v->addLayout(grid);
  v->addWidget(caption);
  v->addStretch(1);
  fill_with_scroll_area(this, content);
  connect(run_, &QPushButton::clicked, this, [this] { start(); });
  updateStatus();
}

LatentKvPanel::~LatentKvPanel() { shutdown(); }

void LatentKvPanel::shutdown() { pair_->shutdown(); }

bool LatentKvPanel::start(QString* why) {
  QString err;
  if (prompt_->text().trimmed().isEmpty()) err = tr("Enter a prompt.");
  EngineConfig c;
  c.block_size = 16;
  c.kv_dtype = KvDtype::F16;
  c.num_blocks = 0;  // from the budget: the point of the comparison
  c.kv_memory_bytes = kBudgetBytes;
  c.prefix_caching = false;
  c.sched.max_model_len = 256;
  if (err.isEmpty()) pair_->start(c, &err);
  if (!err.isEmpty()) {
    if (!pair_->isRunning()) error_ = err;
    if (why) *why = err;
    updateStatus();
    return false;
  }
  error_.clear();
  for (int i = 0; i < 2; ++i) {
    runs_[static_cast<size_t>(i)] = Run{};
    for (QLabel* l : cells_[static_cast<size_t>(i)]) l->setText(QStringLiteral("…"));
  }
  updateStatus();
  return true;
}

void LatentKvPanel::onLoaded(int i, const ModelInfo& info) {
  runs_[static_cast<size_t>(i)].config = info.modelConfig;
  fill(i);
}

void LatentKvPanel::onSnapshot(int i, const SnapshotPtr& s) {
  Run& r = runs_[static_cast<size_t>(i)];
  r.last = s;
  r.peakBlocks = std::max(r.peakBlocks, s->memory.blocks_used);
  r.peakTokens = std::max<qint64>(r.peakTokens, s->memory.slots_filled);
  r.peakBytes = std::max<qint64>(r.peakBytes, s->memory.kv_used_bytes);
  fill(i);
}

// Every cell from the run's own config and newest snapshot.
void LatentKvPanel::fill(int i) {
  const Run& r = runs_[static_cast<size_t>(i)];
  const ModelConfig& c = r.config;
  auto set = [&](Row row, const QString& text) { cell(i, row)->setText(text); };
  set(ModelRow, tr("%1 layers, %2 wide, %3 query heads").arg(c.n_layer).arg(c.n_embd).arg(c.n_head));
  set(RowFormula, formula(c));
  if (!r.last) return;
  const MemorySnap& m = r.last->memory;
  set(PerToken, tr("<b>%1 B</b>").arg(fmt(m.kv_bytes_per_token)));
  set(Pool, tr("<b>%1 blocks</b> of %2 B (%3 tokens)")
                .arg(m.blocks_total)
                .arg(fmt(m.kv_bytes_per_block))
                .arg(fmt(static_cast<qint64>(m.blocks_total) * r.last->block_size)));
  set(Filled, tr("%1 blocks, %2 tokens (at most, during the run)").arg(r.peakBlocks).arg(fmt(r.peakTokens)));
  set(InUse, tr("%1 B of %2 B").arg(fmt(r.peakBytes), fmt(m.kv_pool_bytes)));
}

void LatentKvPanel::updateStatus() {
  run_->setEnabled(!isRunning());
  const QString error = error_.isEmpty() ? pair_->error() : error_;
  if (!error.isEmpty())
    status_->setText(tr("Error: %1").arg(error));
  else if (isRunning())
    status_->setText(tr("Running the prompt on both models…"));
  else if (finished() && runs_[Latent].last && runs_[Gqa].last && runs_[Gqa].last->memory.blocks_total > 0)
    status_->setText(
        tr("Done: the same prompt fills %1 and %2 blocks; the same memory holds %3× the blocks "
           "with the latent cache.")
            .arg(runs_[Latent].peakBlocks)
            .arg(runs_[Gqa].peakBlocks)
            .arg(static_cast<double>(runs_[Latent].last->memory.blocks_total) / runs_[Gqa].last->memory.blocks_total, 0,
                 'f', 1));
  else
    status_->setText(tr("Run both to compare the caches of the two models."));
}

}  // namespace kvscope::ui
