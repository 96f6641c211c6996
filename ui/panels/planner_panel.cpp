#include "panels/planner_panel.h"

#include <QComboBox>
#include <QFormLayout>
#include <QHeaderView>
#include <QIntValidator>
#include <QLabel>
#include <QLineEdit>
#include <QScrollArea>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include "kv/kv_planner.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

QString bytes_text(int64_t b) {
  return QStringLiteral("%1 GB (%2 GiB)")
      .arg(static_cast<double>(b) / 1e9, 0, 'f', 1)
      .arg(static_cast<double>(b) / (1ull << 30), 0, 'f', 1);
}

// A hybrid recurrent model: the fixed state per sequence beside the per-token KV, and how many
// sequences of the context fit against the same model with attention in every layer.
QString hybrid_text(const PlanInput& in, const PlanResult& r) {
  if (!in.model.hybrid()) return {};
  return QObject::tr(
             "<br><b>Recurrent state</b>: %1 layers × %2 B = %3 per sequence, fixed whatever its length "
             "(%4 for the batch).<br>%5 GPU(s) beside the weights hold <b>%6</b> sequences of %7 tokens; "
             "the same model with attention in all %8 layers: <b>%9</b>. The state equals that KV at %10 "
             "tokens.")
      .arg(in.model.n_recurrent_layers)
      .arg(in.model.state_bytes_per_layer)
      .arg(bytes_text(r.state_bytes_per_seq), bytes_text(r.state_bytes))
      .arg(r.fit_gpus)
      .arg(r.seqs_fit)
      .arg(in.context)
      .arg(in.model.n_layer)
      .arg(r.seqs_fit_full_attention)
      .arg(r.break_even_tokens);
}

}  // namespace

PlannerPanel::PlannerPanel(QWidget* parent) : QWidget(parent) {
  preset_ = new QComboBox;
  for (const PlanModel& m : plan_presets()) {
    preset_->addItem(QString::fromStdString(m.name), QString::fromStdString(m.name));
    preset_->setItemData(preset_->count() - 1, QString::fromStdString(m.note), Qt::ToolTipRole);
  }
  context_ = new QLineEdit(QStringLiteral("128K"));
  context_->setToolTip(tr("Tokens per sequence: 131072, 128K, 1M…"));
  batch_ = new QSpinBox;
  batch_->setRange(1, 100000);
  weights_ = new QComboBox;
  for (const char* w : {"f16", "bf16", "f32", "fp8", "int8", "q8_0", "q6_k", "q4_k", "int4", "q4_0"})
    weights_->addItem(QString::fromLatin1(w));
  kvDtype_ = new QComboBox;
  for (KvDtype d : kAllKvDtypes) kvDtype_->addItem(QString::fromLatin1(kv_dtype_name(d)));
  kvDtype_->setCurrentText(QStringLiteral("f16"));
  window_ = new QLineEdit(QStringLiteral("0"));
  window_->setToolTip(tr("Sliding window in tokens (0: full attention); 32K, 4096…"));
  sinks_ = new QSpinBox;
  sinks_->setRange(0, 1 << 20);
  prefix_ = new QLineEdit(QStringLiteral("0"));
  prefix_->setToolTip(tr("Tokens every sequence shares (a system prompt), stored once thanks to the prefix cache."));
  gpuGib_ = new QSpinBox;
  gpuGib_->setRange(1, 4096);
  gpuGib_->setValue(80);
  gpuGib_->setSuffix(tr(" GiB"));

  auto* form = new QFormLayout;
  form->addRow(tr("Model"), preset_);
  form->addRow(tr("Context"), context_);
  form->addRow(tr("Batch"), batch_);
  form->addRow(tr("Weights"), weights_);
  form->addRow(tr("KV dtype"), kvDtype_);
  form->addRow(tr("Window"), window_);
  form->addRow(tr("Sinks"), sinks_);
  form->addRow(tr("Shared prefix"), prefix_);
  form->addRow(tr("GPU memory"), gpuGib_);

  formula_ = new QLabel;
  formula_->setWordWrap(true);
  formula_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  message_ = new QLabel;
  message_->setWordWrap(true);
  message_->setStyleSheet(QStringLiteral("color:#c62828"));
  table_ = new QTableWidget(5, 2);
  table_->setHorizontalHeaderLabels({tr("GQA (real)"), tr("all heads (statement)")});
  table_->setVerticalHeaderLabels({tr("KV per token"), tr("weights"), tr("KV cache"), tr("total"), tr("GPUs")});
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setMinimumHeight(150);

  // Scrolls inside a short dock instead of making the whole window taller.
  auto* content = new QWidget;
  auto* v = new QVBoxLayout(content);
  v->addLayout(form);
  v->addWidget(message_);
  v->addWidget(formula_);
  v->addWidget(table_, 1);
  fill_with_scroll_area(this, content);

  preset_->setCurrentIndex(std::max(0, preset_->findData(QStringLiteral("70B"))));
  for (QLineEdit* e : {context_, window_, prefix_}) connect(e, &QLineEdit::textChanged, this, &PlannerPanel::recompute);
  for (QComboBox* c : {preset_, weights_, kvDtype_})
    connect(c, &QComboBox::currentIndexChanged, this, &PlannerPanel::recompute);
  for (QSpinBox* s : {batch_, sinks_, gpuGib_}) connect(s, &QSpinBox::valueChanged, this, &PlannerPanel::recompute);
  recompute();
}

QString PlannerPanel::resultText() const {
  QStringList rows;
  for (int r = 0; r < table_->rowCount(); ++r)
    rows << table_->verticalHeaderItem(r)->text() + QStringLiteral(": ") +
                (table_->item(r, 0) ? table_->item(r, 0)->text() : QString()) + QStringLiteral(" | ") +
                (table_->item(r, 1) ? table_->item(r, 1)->text() : QString());
  return formula_->text() + QLatin1Char('\n') + rows.join(QLatin1Char('\n'));
}

void PlannerPanel::recompute() {
  const auto model = find_plan_preset(preset_->currentData().toString().toStdString());
  const auto ctx = parse_token_count(context_->text().trimmed().toStdString());
  const auto window = window_->text().trimmed() == QLatin1String("0")
                          ? std::optional<int64_t>(0)
                          : parse_token_count(window_->text().trimmed().toStdString());
  const auto prefix = prefix_->text().trimmed() == QLatin1String("0")
                          ? std::optional<int64_t>(0)
                          : parse_token_count(prefix_->text().trimmed().toStdString());
  if (!model || !ctx || !window || !prefix) {
    message_->setText(tr("Context, window and shared prefix take token counts such as 4096, 32K or 1M."));
    return;
  }
  PlanInput in;
  in.model = *model;
  in.context = *ctx;
  in.batch = batch_->value();
  in.weights = weights_->currentText().toStdString();
  in.kv_dtype = *parse_kv_dtype(kvDtype_->currentText().toStdString());
  in.window = static_cast<int32_t>(*window);
  in.sinks = sinks_->value();
  in.shared_prefix = *prefix;
  in.gpu_gib = gpuGib_->value();
  try {
    const PlanResult gqa = plan_memory(in);
    in.mha = true;
    const PlanResult mha = plan_memory(in);
    message_->clear();
    formula_->setText(
        (in.model.latent()
             ? tr("<b>KV bytes per token</b>: latent attention caches one row per token and layer, read by every "
                  "head:<br>real: %1<br>as multi-head: %2")
             : tr("<b>KV bytes per token</b> = 2 (K and V) × layers × KV heads × head_dim × bytes per element:<br>"
                  "real: %1<br>statement: %2"))
            .arg(QString::fromStdString(gqa.formula).toHtmlEscaped(),
                 QString::fromStdString(mha.formula).toHtmlEscaped()) +
        (in.model.n_expert > 0 ? tr("<br>MoE: %1 experts, %2 per token. Experts live in the FFN: every expert's "
                                    "weights count, the KV per token does not change with them.")
                                     .arg(in.model.n_expert)
                                     .arg(in.model.n_expert_used)
                               : QString()) +
        hybrid_text(in, gqa));
    int c = 0;
    for (const PlanResult* r : {&gqa, &mha}) {
      const QStringList vals = {tr("%1 KiB").arg(static_cast<double>(r->kv_bytes_per_token) / 1024.0, 0, 'f', 1),
                                bytes_text(r->weights_bytes), bytes_text(r->kv_bytes), bytes_text(r->total_bytes),
                                tr("%1 × %2 GiB").arg(r->gpus).arg(gpuGib_->value())};
      for (int row = 0; row < vals.size(); ++row) {
        auto* it = table_->item(row, c);
        if (!it) table_->setItem(row, c, it = new QTableWidgetItem);
        it->setText(vals[row]);
      }
      ++c;
    }
  } catch (const std::exception& e) { message_->setText(QString::fromUtf8(e.what())); }
}

}  // namespace kvscope::ui
