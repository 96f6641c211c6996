#include "panels/no_cache_panel.h"

#include <qcustomplot.h>

#include <QFile>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTextStream>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

#include "widgets/live_label.h"
#include "widgets/theme.h"

namespace kvscope::ui {

namespace {

const QColor kCachedColor(0x4e, 0x79, 0xa7);
const QColor kNoCacheColor(0xe1, 0x57, 0x59);

QString fmt_count(qint64 n) { return QLocale(QLocale::English).toString(n); }

}  // namespace

NoCachePanel::NoCachePanel(const EngineSettingsSource* settings, QWidget* parent)
    : QWidget(parent), settings_(settings) {
  prompt_ = new QLineEdit(QStringLiteral("Once upon a time there was a little dog named Spot."));
  prompt_->setToolTip(tr("The prompt both runs generate from (BOS is added)."));
  tokens_ = new QSpinBox;
  tokens_->setRange(1, 4000);
  tokens_->setValue(200);
  tokens_->setToolTip(
      tr("Tokens to generate in each run (greedy, end-of-text ignored so both runs reach this count)."));
  run_ = new QPushButton(tr("Run both"));
  run_->setToolTip(
      tr("Build two engines with the Settings panel's model, block size and KV dtype — one with the KV "
         "cache, one without — and generate from the prompt on each, the cached run first."));
  csv_ = new QPushButton(tr("Export CSV…"));
  csv_->setToolTip(tr("Every plotted point: per generated token, tokens computed and step time of both runs."));
  status_ = new LiveLabel;

  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Prompt")));
  controls->addWidget(prompt_, 1);
  controls->addWidget(new QLabel(tr("New tokens")));
  controls->addWidget(tokens_);
  controls->addWidget(run_);
  controls->addWidget(csv_);

  // One chart, two stacked axis rects on the same x axis: the work per token (top) and what it
  // cost in time (bottom).
  plot_ = new QCustomPlot;
  plot_->setMinimumHeight(300);
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  QCPAxisRect* tokRect = plot_->axisRect();
  msRect_ = new QCPAxisRect(plot_);
  plot_->plotLayout()->addElement(1, 0, msRect_);
  auto* margins = new QCPMarginGroup(plot_);
  tokRect->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
  msRect_->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
  for (QCPAxisRect* r : {tokRect, msRect_}) {
    r->setRangeDrag(Qt::Horizontal | Qt::Vertical);
    r->setRangeZoom(Qt::Horizontal | Qt::Vertical);
  }
  plot_->xAxis->setTickLabels(false);
  plot_->yAxis->setLabel(tr("tokens computed\nper generated token"));
  msRect_->axis(QCPAxis::atBottom)->setLabel(tr("generated token #"));
  msRect_->axis(QCPAxis::atLeft)->setLabel(tr("engine step time\nper generated token (ms)"));
  connect(plot_->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), msRect_->axis(QCPAxis::atBottom),
          qOverload<const QCPRange&>(&QCPAxis::setRange));
  connect(msRect_->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), plot_->xAxis,
          qOverload<const QCPRange&>(&QCPAxis::setRange));
  plot_->legend->setVisible(true);
  plot_->legend->setFillOrder(QCPLegend::foColumnsFirst);
  plot_->legend->setWrap(2);
  tokRect->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
  for (int i = 0; i < 2; ++i) {
    Run& r = runs_[static_cast<size_t>(i)];
    const QColor c = i == Cached ? kCachedColor : kNoCacheColor;
    r.name = i == Cached ? tr("with KV cache") : tr("no KV cache (recompute everything)");
    r.tokGraph = plot_->addGraph(plot_->xAxis, plot_->yAxis);
    r.tokGraph->setName(r.name);
    r.tokGraph->setPen(QPen(c, 2));
    r.tokGraph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, c, c, 3));
    r.msGraph = plot_->addGraph(msRect_->axis(QCPAxis::atBottom), msRect_->axis(QCPAxis::atLeft));
    r.msGraph->setName(r.name);
    r.msGraph->setPen(QPen(c, 1.5));
    r.msGraph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, c, c, 3));
    r.msGraph->removeFromLegend();  // same colours as above: one legend for both rects
  }

  // Labels on the lines themselves (their numbers read from the points) and a note on the step
  // times: medians at the start and the end, and any step the axis leaves out.
  auto makeLabel = [this](QCPAxisRect* rect, const QColor& c) {
    auto* t = new QCPItemText(plot_);
    t->setClipAxisRect(rect);
    t->position->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    t->position->setAxisRect(rect);
    t->setColor(c);
    QFont f = t->font();
    f.setBold(true);
    t->setFont(f);
    t->setPadding(QMargins(6, 2, 6, 2));
    t->setVisible(false);
    return t;
  };
  cachedLabel_ = makeLabel(tokRect, kCachedColor);
  cachedLabel_->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
  noCacheLabel_ = makeLabel(tokRect, kNoCacheColor);
  noCacheLabel_->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  msNote_ = makeLabel(msRect_, QColor());
  msNote_->setFont(plot_->font());
  msNote_->position->setType(QCPItemPosition::ptAxisRectRatio);
  msNote_->position->setCoords(0.01, 0.02);
  msNote_->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
  msNote_->setTextAlignment(Qt::AlignLeft);

  caption_ = new QLabel(tr(
      "<b>Why:</b> without a KV cache, generating token <i>n</i> recomputes the keys and values of all "
      "<i>P</i>&nbsp;+&nbsp;<i>n</i>&nbsp;−&nbsp;1 tokens before it, so the work per token grows linearly and the "
      "total for <i>N</i> tokens grows quadratically (≈&nbsp;<i>N·P</i>&nbsp;+&nbsp;<i>N</i>²/2 token computations), "
      "while the cache stores each token's K/V once, so every new token computes just itself and the total grows "
      "linearly (<i>P</i>&nbsp;+&nbsp;<i>N</i>)."));
  caption_->setWordWrap(true);
  totals_ =
      new QLabel(tr("Run both to measure. Every point is read from the engine's per-step snapshots "
                    "(step time and the prefill / decode token counters)."));
  totals_->setWordWrap(true);
  totals_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* content = new QWidget;
  content->setMinimumSize(620, 480);
  auto* v = new QVBoxLayout(content);
  v->setContentsMargins(4, 4, 4, 4);
  v->addLayout(controls);
  v->addWidget(status_);
  v->addWidget(plot_, 1);
  v->addWidget(caption_);
  v->addWidget(totals_);
  fill_with_scroll_area(this, content);

  replotTimer_ = new QTimer(this);
  replotTimer_->setSingleShot(true);
  replotTimer_->setInterval(100);
  connect(replotTimer_, &QTimer::timeout, this, [this] { plot_->replot(); });

  connect(run_, &QPushButton::clicked, this, [this] {
    QString why;
    if (!start(prompt_->text(), tokens_->value(), &why)) {
      error_ = why;
      updateStatus();
    }
  });
  connect(csv_, &QPushButton::clicked, this, [this] {
    const QString p = QFileDialog::getSaveFileName(this, tr("Export points"), QStringLiteral("no-kv-cache.csv"),
                                                   tr("CSV files (*.csv)"));
    if (!p.isEmpty()) exportCsv(p);
  });
  applyTheme();
  restyle_on_palette_change(this, [this] { applyTheme(); });
  rescale();
  updateStatus();
}

NoCachePanel::~NoCachePanel() { shutdown(); }

void NoCachePanel::shutdown() {
  for (Run& r : runs_)
    if (r.host) r.host->shutdown();
}

void NoCachePanel::applyTheme() {
  const QPalette pal = palette();
  const QColor fg = pal.color(QPalette::WindowText), bg = pal.color(QPalette::Base);
  msNote_->setColor(fg);
  msNote_->setBrush(QColor(bg.red(), bg.green(), bg.blue(), 220));
  style_plot(plot_, pal, 220);
}

void NoCachePanel::ensureHost(int i) {
  Run& r = runs_[static_cast<size_t>(i)];
  if (r.host) return;
  r.host = std::make_unique<EngineHost>(nullptr);
  EngineHost* h = r.host.get();
  connect(h, &EngineHost::snapshot, this, [this, i](const SnapshotPtr& s, const EventBatch&) { onSnapshot(i, s); });
  connect(h, &EngineHost::modelLoaded, this, [this, i](const ModelInfo&) {
    Run& run = runs_[static_cast<size_t>(i)];
    if (!run.active) return;
    run.loaded = true;
    maybeSubmit();
  });
  connect(h, &EngineHost::error, this, [this, i](const QString& msg) {
    Run& run = runs_[static_cast<size_t>(i)];
    if (!run.active) return;
    error_ = tr("%1: %2").arg(run.name, msg);
    for (Run& other : runs_) other.active = false;
    running_ = false;
    updateStatus();
  });
  connect(h->worker(), &EngineThreadWorker::submitted, this, [this, i](quint64 tag, qint64, int promptTokens) {
    Run& run = runs_[static_cast<size_t>(i)];
    if (run.active && tag == run.tag) run.promptTokens = promptTokens;
  });
  connect(h->worker(), &EngineThreadWorker::requestFinished, this, [this, i](const TurnStats& t) {
    Run& run = runs_[static_cast<size_t>(i)];
    if (!run.active || t.tag != run.tag) return;
    run.stats = t;
    checkDone(i);
  });
}

bool NoCachePanel::start(const QString& prompt, int newTokens, QString* why) {
  auto refuse = [why](const QString& msg) {
    if (why) *why = msg;
    return false;
  };
  if (running_) return refuse(tr("A run is in progress."));
  if (prompt.trimmed().isEmpty()) return refuse(tr("Enter a prompt."));
  if (newTokens < 1) return refuse(tr("Generate at least one token."));
  QString err;
  const auto base = settings_->config(&err);
  if (!base) return refuse(tr("The Settings panel's configuration is invalid: %1").arg(err));

  // Only the cache differs between the runs: the Settings panel's model, block size, KV dtype and
  // batch budget; no window, sinks or prefix cache (one prompt has nothing to share), and a pool
  // just big enough for the one sequence (a prompt never has more tokens than UTF-8 bytes + BOS).
  EngineConfig c = *base;
  c.window = 0;
  c.sinks = 0;
  c.contiguous_baseline = false;
  c.prefix_caching = false;
  c.no_kv_cache = false;
  const int maxLen = static_cast<int>(prompt.toUtf8().size()) + 1 + newTokens;
  c.num_blocks = (maxLen + c.block_size - 1) / c.block_size + 1;
  EngineConfig nc = c;
  nc.no_kv_cache = true;

  promptText_ = prompt;
  newTokens_ = newTokens;
  error_.clear();
  for (int i = 0; i < 2; ++i) {
    Run& r = runs_[static_cast<size_t>(i)];
    ensureHost(i);
    r.cfg = i == Cached ? c : nc;
    r.loaded = r.submitted = r.done = false;
    r.active = true;
    r.tag = 0;
    r.promptTokens = 0;
    r.stats.reset();
    r.lastStep = r.lastPrefilled = r.lastDecoded = 0;
    r.pending = Point{};
    r.missedSteps = 0;
    r.points.clear();
    r.last.reset();
    r.tokGraph->data()->clear();
    r.msGraph->data()->clear();
    r.host->setStepDelay(0);
    r.host->setEveryStep(true);  // a coalesced snapshot would lose the step times in between
    r.host->loadModel(settings_->modelPath(), r.cfg);
  }
  running_ = true;
  totals_->setText(tr("Running…"));
  rescale();
  updateStatus();
  return true;
}

void NoCachePanel::maybeSubmit() {
  // Sequential, so the two runs never compete for the CPU and each step time is its own.
  for (int i = 0; i < 2; ++i) {
    Run& r = runs_[static_cast<size_t>(i)];
    if (!r.active || r.submitted || !r.loaded) continue;
    if (i == NoCache && !runs_[Cached].done) continue;
    r.submitted = true;
    r.tag = r.host->submitText(promptText_, newTokens_, true,
                               i == Cached ? QStringLiteral("cached") : QStringLiteral("no cache"));
  }
  updateStatus();
}

void NoCachePanel::onSnapshot(int i, const SnapshotPtr& s) {
  Run& r = runs_[static_cast<size_t>(i)];
  if (!s || !r.active || !r.submitted) return;
  if (s->step <= r.lastStep) return;  // the same step delivered again (idle, forced delivery)
  if (s->step != r.lastStep + 1) r.missedSteps += static_cast<int>(s->step - r.lastStep - 1);
  r.lastStep = s->step;
  r.last = s;
  const uint64_t dPre = s->counters.tokens_prefilled - r.lastPrefilled;
  const uint64_t dDec = s->counters.tokens_decoded - r.lastDecoded;
  r.lastPrefilled = s->counters.tokens_prefilled;
  r.lastDecoded = s->counters.tokens_decoded;
  // One sequence: a step either (re)computes a chunk of the sequence (tokens_prefilled grows by
  // the chunk; the token sampled after it is not computed yet) or decodes (the one token
  // sampled last step is computed and tokens_decoded grows by one).
  r.pending.stepMs += s->step_ms;
  r.pending.tokens += static_cast<qint64>(dPre > 0 ? dPre : dDec);
  ++r.pending.steps;
  if (dDec > 0) {
    r.points.push_back(r.pending);
    const double x = static_cast<double>(r.points.size());
    r.tokGraph->addData(x, static_cast<double>(r.pending.tokens));
    r.msGraph->addData(x, r.pending.stepMs);
    r.pending = Point{};
    rescale();
    updateStatus();
  }
  checkDone(i);
}

void NoCachePanel::checkDone(int i) {
  Run& r = runs_[static_cast<size_t>(i)];
  if (!r.active || r.done || !r.stats) return;
  const bool ok = r.stats->state == QLatin1String("finished");
  // The final snapshot arrives just after the finished request: wait for its point.
  if (ok && static_cast<int>(r.points.size()) < r.stats->generated) return;
  r.done = true;
  if (!ok) {
    error_ = tr("%1: the request was %2 %3").arg(r.name, r.stats->state, r.stats->error);
    for (Run& other : runs_) other.active = false;
    running_ = false;
  } else if (i == Cached) {
    maybeSubmit();
  } else {
    running_ = false;
  }
  updateTotals();
  updateStatus();
  rescale();
  plot_->replot();
  if (!running_) emit runFinished();
}

bool NoCachePanel::finished() const { return runs_[Cached].done && runs_[NoCache].done && error_.isEmpty(); }

std::optional<bool> NoCachePanel::sameTokens() const {
  if (!runs_[Cached].stats || !runs_[NoCache].stats) return std::nullopt;
  return runs_[Cached].stats->tokens == runs_[NoCache].stats->tokens;
}

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Median step time of points [lo, hi).
double median_ms(const std::vector<NoCachePanel::Point>& pts, size_t lo, size_t hi) {
  std::vector<double> v;
  for (size_t k = lo; k < std::min(hi, pts.size()); ++k) v.push_back(pts[k].stepMs);
  return median_of(v);
}

QString fmt_ms(double ms) { return QString::number(ms, 'f', ms < 1 ? 3 : (ms < 10 ? 2 : 1)); }

}  // namespace

void NoCachePanel::rescale() {
  double maxTok = 1;
  std::vector<double> ms;
  for (const Run& r : runs_)
    for (const Point& p : r.points) {
      maxTok = std::max(maxTok, static_cast<double>(p.tokens));
      ms.push_back(p.stepMs);
    }
  std::sort(ms.begin(), ms.end());
  const double maxMs = ms.empty() ? 0.01 : std::max(ms.back(), 0.01);
  // A shared machine stalls a step now and then; one stall must not flatten the trend. The axis
  // reaches 1.3x the 98th percentile, and the note says how many steps it leaves out.
  double top = maxMs;
  int above = 0;
  if (ms.size() >= 20) {
    const double robust = 1.3 * ms[static_cast<size_t>(0.98 * static_cast<double>(ms.size() - 1))];
    if (robust < maxMs) {
      top = robust;
      above = static_cast<int>(ms.end() - std::upper_bound(ms.begin(), ms.end(), top * 1.08));
    }
  }
  const double n = std::max(newTokens_, 1);
  plot_->xAxis->setRange(0, n + 1);
  // A little room below zero so the flat cached line does not hide in the axis.
  plot_->yAxis->setRange(-0.03 * maxTok * 1.15, maxTok * 1.15);
  msRect_->axis(QCPAxis::atLeft)->setRange(-0.03 * top * 1.08, top * 1.08);

  const auto& a = runs_[Cached].points;
  const auto& b = runs_[NoCache].points;
  // Line labels at 60% of the run, their numbers read from the points there.
  if (!a.empty()) {
    const size_t k = std::min(a.size() - 1, static_cast<size_t>(0.6 * n));
    cachedLabel_->position->setCoords(static_cast<double>(k + 1), static_cast<double>(a[k].tokens));
    cachedLabel_->setText(tr("with KV cache: %1 token computed per new token").arg(a[k].tokens));
    cachedLabel_->setVisible(true);
  } else {
    cachedLabel_->setVisible(false);
  }
  if (!b.empty()) {
    const size_t k = std::min(b.size() - 1, static_cast<size_t>(0.55 * n));
    noCacheLabel_->position->setCoords(static_cast<double>(k + 1), static_cast<double>(b[k].tokens));
    noCacheLabel_->setText(tr("no KV cache: %1 tokens recomputed for token %2").arg(b[k].tokens).arg(k + 1));
    noCacheLabel_->setVisible(true);
  } else {
    noCacheLabel_->setVisible(false);
  }
  QStringList note;
  if (!a.empty()) note << tr("median step with the KV cache: %1 ms").arg(fmt_ms(median_ms(a, 1, a.size())));
  if (b.size() >= 20)
    note << tr("without it: %1 ms over tokens 1–10, %2 ms over tokens %3–%4")
                .arg(fmt_ms(median_ms(b, 0, 10)))
                .arg(fmt_ms(median_ms(b, b.size() - 10, b.size())))
                .arg(b.size() - 9)
                .arg(b.size());
  if (above > 0)
    note << (above == 1 ? tr("1 slower step above the axis (%1 ms): drag or zoom to see it").arg(fmt_ms(maxMs))
                        : tr("%1 slower steps above the axis (up to %2 ms): drag or zoom to see them")
                              .arg(above)
                              .arg(fmt_ms(maxMs)));
  msNote_->setText(note.join(QLatin1Char('\n')));
  msNote_->setVisible(!note.isEmpty());
  requestReplot();
}

void NoCachePanel::requestReplot() {
  if (!replotTimer_->isActive()) replotTimer_->start();
}

QString NoCachePanel::statusText() const { return status_->plainText(); }

void NoCachePanel::updateStatus() {
  if (!error_.isEmpty()) {
    status_->setText(QStringLiteral("<span style='color:#c62828'>%1</span>").arg(error_.toHtmlEscaped()));
    return;
  }
  if (!runs_[Cached].active && !runs_[Cached].done) {
    status_->setText(
        tr("Same prompt, same greedy tokens, two engines: one keeps the KV cache, one recomputes everything."));
    return;
  }
  QStringList parts;
  for (const Run& r : runs_) {
    QString state;
    if (r.done)
      state = tr("done");
    else if (!r.loaded)
      state = tr("loading");
    else if (!r.submitted)
      state = tr("waiting for the cached run");
    else
      state = tr("running");
    parts << tr("<b>%1</b>: %2 / %3 tokens (%4)")
                 .arg(r.name.section(QLatin1Char(' '), 0, 2).toHtmlEscaped())
                 .arg(r.points.size())
                 .arg(newTokens_)
                 .arg(state);
  }
  status_->setText(parts.join(QStringLiteral(" · ")));
}

void NoCachePanel::updateTotals() {
  const Run &a = runs_[Cached], &b = runs_[NoCache];
  auto sum = [](const Run& r, qint64* tokens, double* ms) {
    *tokens = 0;
    *ms = 0;
    for (const Point& p : r.points) *tokens += p.tokens, *ms += p.stepMs;
  };
  qint64 ta = 0, tb = 0;
  double ma = 0, mb = 0;
  sum(a, &ta, &ma);
  sum(b, &tb, &mb);
  QString text;
  if (!a.points.empty()) {
    text = tr("<b>Totals</b> (summed from the snapshots, prompt <i>P</i> = %1 tokens): with the cache <b>%2</b> tokens "
              "computed in %3 ms")
               .arg(a.promptTokens)
               .arg(fmt_count(ta))
               .arg(ma, 0, 'f', 1);
    if (!b.points.empty())
      text += tr("; without it <b>%1</b> tokens in %2 ms — %3× the work, %4× the time.")
                  .arg(fmt_count(tb))
                  .arg(mb, 0, 'f', 1)
                  .arg(ta ? static_cast<double>(tb) / static_cast<double>(ta) : 0.0, 0, 'f', 1)
                  .arg(ma > 0 ? mb / ma : 0.0, 0, 'f', 1);
    else
      text += QLatin1Char('.');
  }
  if (const auto same = sameTokens())
    text += *same ? tr(" Both runs generated the same %1 tokens.").arg(a.stats->generated)
                  : tr(" <span style='color:#c62828'>The runs generated different tokens.</span>");
  const int missed = a.missedSteps + b.missedSteps;
  if (missed > 0) text += tr(" (%1 step snapshots were not delivered; their step times are missing.)").arg(missed);
  totals_->setText(text);
}

QString NoCachePanel::totalsText() const { return totals_->text(); }

bool NoCachePanel::exportCsv(const QString& path) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
  QTextStream out(&f);
  out << "token,cached_tokens_computed,cached_step_ms,cached_steps,no_cache_tokens_computed,no_cache_step_ms,no_cache_steps\n";
  const size_t n = std::max(runs_[Cached].points.size(), runs_[NoCache].points.size());
  for (size_t k = 0; k < n; ++k) {
    out << k + 1;
    for (const Run& r : runs_) {
      if (k < r.points.size())
        out << ',' << r.points[k].tokens << ',' << r.points[k].stepMs << ',' << r.points[k].steps;
      else
        out << ",,,";
    }
    out << '\n';
  }
  return true;
}

}  // namespace kvscope::ui
