#include "panels/hybrid_state_panel.h"

#include <qcustomplot.h>

#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>
#include <map>

#include "widgets/live_label.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

QString fmt(qint64 n) { return QLocale(QLocale::English).toString(n); }
QString kib(qint64 n) { return QLocale(QLocale::English).formattedDataSize(n, 1, QLocale::DataSizeIecFormat); }

// Both models: 128 wide, 8 layers, 4 query heads of 32 sharing 2 KV heads. qwen35: layers 3
// and 7 attention, the other six Gated DeltaNet with 4 value heads of a 64 x 64 state (plus a
// 4-tap conv); qwen3: attention in all eight.
SyntheticSpec spec_for(int run) {
  SyntheticSpec s;
  s.dtype = GgmlType::F32;
  s.arch = run == HybridStatePanel::Hybrid ? "qwen35" : "qwen3";
  s.n_vocab = 512;
  s.n_embd = 128;
  s.n_layer = 8;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.n_ctx = 4096;
  s.ssm_state = 64;
  s.seed = 11;
  return s;
}

// The state slots and KV blocks one snapshot shows held, at its live sequence's length.
bool point_of(const Snapshot& s, HybridStatePanel::Point& p) {
  for (const SeqSnap& q : s.seqs)
    if (!is_final_state(q.state) && q.num_computed > 0) {
      p.tokens = q.num_computed;
      p.state_bytes = s.state.on ? s.state.bytes_per_slot * s.state.slots_used : 0;
      p.kv_bytes = s.memory.kv_used_bytes;
      return true;
    }
  return false;
}

}  // namespace

HybridStatePanel::HybridStatePanel(QWidget* parent) : QWidget(parent) {
  pair_ = new SyntheticPair(
      {SyntheticPair::Side{QStringLiteral("qwen35"), QStringLiteral("hybrid-qwen35.gguf"), spec_for(Hybrid)},
       SyntheticPair::Side{QStringLiteral("qwen3"), QStringLiteral("dense-qwen3.gguf"), spec_for(Dense)}},
      [this](int i, EngineHost& host, const ModelInfo&) {
        Request req;
        for (int k = 0; k < tokens_->value(); ++k) req.prompt.push_back(3 + (k * 37 + 11) % 500);
        req.max_new_tokens = 16;
        req.ignore_eos = true;
        req.label = pair_->name(i).toStdString();
        return host.submit(req);
      },
      this);
  connect(pair_, &SyntheticPair::snapshot, this, &HybridStatePanel::onSnapshot);
  connect(pair_, &SyntheticPair::stopped, this, [this] {
    replot();
    updateStatus();
    emit runFinished();
  });
  tokens_ = new QSpinBox;
  tokens_->setRange(64, 3000);
  tokens_->setValue(1024);
  tokens_->setSingleStep(256);
  tokens_->setToolTip(tr("Prompt length: the same tokens go through both models, 64 per step."));
  run_ = new QPushButton(tr("Run both"));
  run_->setToolTip(tr("Write the two synthetic models (f16 KV, f32 state) and run the prompt through each."));
  status_ = new LiveLabel;
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Prompt tokens")));
  controls->addWidget(tokens_);
  controls->addWidget(run_);
  controls->addStretch(1);

  plot_ = new QCustomPlot;
  plot_->setMinimumHeight(200);
  plot_->xAxis->setLabel(tr("tokens in the sequence (it grows as the engine steps)"));
  plot_->yAxis->setLabel(tr("memory held (KiB)"));
  plot_->legend->setVisible(true);
  plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
  const QColor colors[2] = {QColor(0x4e, 0x79, 0xa7), QColor(0xe1, 0x57, 0x59)};
  const QString names[2] = {tr("qwen35 (hybrid): state + KV"), tr("qwen3 (attention in every layer): KV")};
  for (int i = 0; i < 2; ++i) {
    graphs_[static_cast<size_t>(i)] = plot_->addGraph();
    graphs_[static_cast<size_t>(i)]->setName(names[i]);
    graphs_[static_cast<size_t>(i)]->setPen(QPen(colors[i], 2));
  }
  stateGraph_ = plot_->addGraph();
  stateGraph_->setName(tr("qwen35: its fixed state alone"));
  stateGraph_->setPen(QPen(colors[0], 1.5, Qt::DashLine));
  breakEven_ = new QCPItemStraightLine(plot_);
  breakEven_->setPen(QPen(QColor(0x59, 0xa1, 0x4f), 1.5, Qt::DotLine));
  breakEven_->setVisible(false);

  result_ = new QLabel;
  result_->setWordWrap(true);
  result_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  result_->setObjectName(QStringLiteral("hybridResult"));
  auto* caption = new QLabel(
      tr("<b>Why:</b> a Gated DeltaNet layer folds every token into a fixed-size state (per value head a "
         "matrix of state × state numbers) instead of keeping each token's key and value, so its memory "
         "is paid once per sequence. Only the attention layers (one in four in Qwen3.5) still grow per token. "
         "Short sequences pay more than a plain model (the state is bigger than a few tokens of KV); past the "
         "break-even length every token costs a quarter as much. Qwen3.5-9B: 49 MiB of state per sequence "
         "and 32 KiB of KV per token, where the same model with attention in all 32 layers would take 128 KiB "
         "per token: break-even at 524 tokens (the KV calculator's Qwen3.5-9B preset)."));
  caption->setWordWrap(true);

  auto* content = new QWidget;
  content->setMinimumSize(560, 420);
  auto* v = new QVBoxLayout(content);
  v->setContentsMargins(4, 4, 4, 4);
  v->addLayout(controls);
  v->addWidget(status_);
  v->addWidget(plot_, 1);
  v->addWidget(result_);
  v->addWidget(caption);
  fill_with_scroll_area(this, content);
  connect(run_, &QPushButton::clicked, this, [this] { start(); });
  style_plot(plot_, palette());
  restyle_on_palette_change(this, [this] { style_plot(plot_, palette()); });
  updateStatus();
}

HybridStatePanel::~HybridStatePanel() { shutdown(); }

void HybridStatePanel::shutdown() { pair_->shutdown(); }

bool HybridStatePanel::start(QString* why) {
  EngineConfig c;
  c.block_size = 16;
  c.kv_dtype = KvDtype::F16;
  c.num_blocks = 256;  // 4096 tokens: both models hold the longest prompt
  c.prefix_caching = false;
  c.sched.max_batched_tokens = 64;  // a point every 64 prompt tokens
  c.sched.max_model_len = 4096;
  QString err;
  if (!pair_->start(c, &err)) {
    if (!pair_->isRunning()) error_ = err;
    if (why) *why = err;
    updateStatus();
    return false;
  }
  error_.clear();
  for (Run& r : runs_) r = Run{};
  replot();
  updateStatus();
  return true;
}

void HybridStatePanel::onSnapshot(int i, const SnapshotPtr& s) {
  Run& r = runs_[static_cast<size_t>(i)];
  r.last = s;
  Point p;
  if (point_of(*s, p) && (r.points.empty() || r.points.back().tokens != p.tokens)) {
    r.points.push_back(p);
    replot();
  }
}

int64_t HybridStatePanel::breakEvenTokens() const {
  const SnapshotPtr& h = runs_[Hybrid].last;
  const SnapshotPtr& d = runs_[Dense].last;
  if (!h || !d || !h->state.on) return -1;
  const int64_t saved_per_token = d->memory.kv_bytes_per_token - h->memory.kv_bytes_per_token;
  if (saved_per_token <= 0) return -1;
  return (h->state.bytes_per_slot + saved_per_token - 1) / saved_per_token;
}

int64_t HybridStatePanel::measuredCrossing() const {
  std::map<int64_t, int64_t> hybrid;  // tokens -> bytes
  for (const Point& p : runs_[Hybrid].points) hybrid[p.tokens] = p.total();
  for (const Point& p : runs_[Dense].points) {
    const auto it = hybrid.find(p.tokens);
    if (it != hybrid.end() && p.total() >= it->second) return p.tokens;
  }
  return -1;
}

QString HybridStatePanel::resultText() const { return result_->text(); }

void HybridStatePanel::replot() {
  double ymax = 1, xmax = 1;
  for (int i = 0; i < 2; ++i) {
    QVector<double> x, y, ys;
    for (const Point& p : runs_[static_cast<size_t>(i)].points) {
      x << static_cast<double>(p.tokens);
      y << p.total() / 1024.0;
      ys << p.state_bytes / 1024.0;
      ymax = std::max(ymax, y.back());
      xmax = std::max(xmax, x.back());
    }
    graphs_[static_cast<size_t>(i)]->setData(x, y, true);
    if (i == Hybrid) stateGraph_->setData(x, ys, true);
  }
  const int64_t be = breakEvenTokens();
  breakEven_->setVisible(be > 0);
  if (be > 0) {
    breakEven_->point1->setCoords(static_cast<double>(be), 0);
    breakEven_->point2->setCoords(static_cast<double>(be), 1);
  }
  plot_->xAxis->setRange(0, std::max(xmax, static_cast<double>(tokens_->value())) * 1.02);
  plot_->yAxis->setRange(0, ymax * 1.3);  // headroom for the legend
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void HybridStatePanel::updateStatus() {
  run_->setEnabled(!isRunning());
  const QString error = error_.isEmpty() ? pair_->error() : error_;
  if (!error.isEmpty())
    status_->setText(tr("Error: %1").arg(error));
  else if (isRunning())
    status_->setText(tr("Running the prompt through both models…"));
  else if (finished())
    status_->setText(tr("Done: memory held at each length, read from each engine's snapshots."));
  else
    status_->setText(tr("Run both to watch the two caches grow."));
  if (!finished() || runs_[Hybrid].points.empty() || runs_[Dense].points.empty()) return;
  const SnapshotPtr& h = runs_[Hybrid].last;
  const SnapshotPtr& d = runs_[Dense].last;
  const Point& ph = runs_[Hybrid].points.back();
  const Point& pd = runs_[Dense].points.back();
  const int64_t crossing = measuredCrossing();
  result_->setText(
      tr("<b>Break-even: %1 tokens.</b> qwen35 holds %2 of state per sequence (%3 slot, any length) and %4 B of KV "
         "per token; qwen3 holds %5 B per token, so the state pays for itself after %2 ÷ (%5 − %4) B = %1 tokens. "
         "Measured: qwen3 first holds at least as much at %6 (a point every 64 prompt tokens, KV held in blocks of 16). "
         "At %7 tokens: qwen35 %8, qwen3 %9.")
          .arg(fmt(breakEvenTokens()))
          .arg(kib(h->state.bytes_per_slot))
          .arg(QString::fromStdString(h->state.dtype))
          .arg(fmt(h->memory.kv_bytes_per_token))
          .arg(fmt(d->memory.kv_bytes_per_token))
          .arg(crossing > 0 ? tr("%1 tokens").arg(fmt(crossing)) : tr("no length of this run"))
          .arg(fmt(std::min(ph.tokens, pd.tokens)))
          .arg(kib(ph.total()))
          .arg(kib(pd.total())));
}

}  // namespace kvscope::ui
