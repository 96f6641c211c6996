#include "panels/chat_panel.h"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QSpinBox>
#include <QTabBar>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTextDocument>
#include <QTimer>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>

namespace kvscope::ui {

ConversationWidget::ConversationWidget(EngineHost* host, const SamplingDefaults& d, QWidget* parent)
    : QWidget(parent), host_(host) {
  view_ = new QTextBrowser;
  view_->setOpenLinks(false);
  view_->setPlaceholderText(
      tr("Type a message below. Each turn re-sends the whole conversation; the blocks of "
         "earlier turns come back from the prefix cache, and the line under each reply says how many."));
  input_ = new QLineEdit;
  input_->setPlaceholderText(tr("Message (Enter to send)"));
  input_->setClearButtonEnabled(true);
  sendBtn_ = new QPushButton(tr("Send"));
  sendBtn_->setDefault(true);
  stopBtn_ = new QPushButton(tr("Stop"));
  stopBtn_->setToolTip(tr("Cancel the reply being generated; its blocks return to the pool at once."));
  stopBtn_->setEnabled(false);
  newBtn_ = new QPushButton(tr("New"));
  newBtn_->setToolTip(tr("Start a new conversation in this tab (forget the history)."));

  temp_ = new QDoubleSpinBox;
  temp_->setRange(0.0, 5.0);
  temp_->setSingleStep(0.1);
  temp_->setToolTip(tr("Temperature: 0 = greedy (always the most likely token)."));
  topK_ = new QSpinBox;
  topK_->setRange(0, 100000);
  topK_->setToolTip(tr("Top-k: sample among the k most likely tokens (0 = off)."));
  topP_ = new QDoubleSpinBox;
  topP_->setRange(0.01, 1.0);
  topP_->setSingleStep(0.05);
  topP_->setToolTip(tr("Top-p (nucleus): smallest set of tokens whose probability reaches p (1 = off)."));
  repPen_ = new QDoubleSpinBox;
  repPen_->setRange(0.5, 2.0);
  repPen_->setSingleStep(0.05);
  repPen_->setToolTip(tr("Repetition penalty over the last 64 tokens (1 = off)."));
  greedy_ = new QPushButton(tr("Greedy (reproducible)"));
  greedy_->setCheckable(true);
  greedy_->setToolTip(
      tr("Always take the most likely token (temperature 0, no top-k, top-p or penalty): the same "
         "reply every time, for teaching runs that must be reproducible. Small base models tend to loop."));
  maxTok_ = new QSpinBox;
  maxTok_->setRange(1, 32768);
  maxTok_->setToolTip(tr("Maximum number of tokens to generate for one reply."));
  seed_ = new QSpinBox;
  seed_->setRange(0, 999999);
  seed_->setToolTip(tr("Random seed: same seed and settings, same reply."));
  setSamplingDefaults(d);

  // Two short rows so the chat dock can stay narrow and leave the middle to the block map.
  auto* samp = new QGridLayout;
  samp->setHorizontalSpacing(6);
  samp->setVerticalSpacing(2);
  int col = 0, line = 0;
  auto addField = [&](const QString& label, QWidget* w) {
    auto* l = new QLabel(label);
    l->setBuddy(w);
    samp->addWidget(l, line, col * 2, Qt::AlignRight);
    samp->addWidget(w, line, col * 2 + 1);
    if (++col == 3) col = 0, ++line;
  };
  addField(tr("temp"), temp_);
  addField(tr("top-k"), topK_);
  addField(tr("top-p"), topP_);
  addField(tr("rep. pen."), repPen_);
  addField(tr("max tokens"), maxTok_);
  addField(tr("seed"), seed_);
  samp->addWidget(greedy_, line + 1, 0, 1, 6);
  for (int c = 1; c < 6; c += 2) samp->setColumnStretch(c, 1);

  auto* row = new QHBoxLayout;
  row->addWidget(input_, 1);
  row->addWidget(sendBtn_);
  row->addWidget(stopBtn_);
  row->addWidget(newBtn_);
  status_ = new QLabel;
  status_->setWordWrap(true);

  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 4, 4, 4);
  v->addWidget(view_, 1);
  v->addLayout(samp);
  v->addLayout(row);
  v->addWidget(status_);

  connect(sendBtn_, &QPushButton::clicked, this, [this] { send(input_->text()); });
  connect(input_, &QLineEdit::returnPressed, this, [this] { send(input_->text()); });
  connect(stopBtn_, &QPushButton::clicked, this, &ConversationWidget::stop);
  connect(newBtn_, &QPushButton::clicked, this, &ConversationWidget::newConversation);
  connect(view_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.scheme() == QLatin1String("story")) emit storyRequested(url.path().toLongLong());
    if (url.scheme() == QLatin1String("think")) {
      const int i = url.path().toInt();
      if (i >= 0 && i < static_cast<int>(views_.size()))
        setReasoningExpanded(i, !views_[static_cast<size_t>(i)].expanded);
    }
  });
  renderTimer_ = new QTimer(this);
  renderTimer_->setSingleShot(true);
  renderTimer_->setInterval(50);
  connect(renderTimer_, &QTimer::timeout, this, [this] { render(); });
  connect(greedy_, &QPushButton::toggled, this, [this](bool on) {
    for (QWidget* f : std::initializer_list<QWidget*>{temp_, topK_, topP_, repPen_}) f->setEnabled(!on);
  });
  EngineThreadWorker* w = host_->worker();
  connect(w, &EngineThreadWorker::submitted, this, &ConversationWidget::onSubmitted);
  connect(w, &EngineThreadWorker::tokenStreamed, this, &ConversationWidget::onToken);
  connect(w, &EngineThreadWorker::reasoningStreamed, this, &ConversationWidget::onReasoning);
  connect(w, &EngineThreadWorker::requestFinished, this, &ConversationWidget::onFinished);
}

void ConversationWidget::setSamplingDefaults(const SamplingDefaults& d) {
  temp_->setValue(d.sampling.temperature);
  topK_->setValue(d.sampling.top_k);
  topP_->setValue(d.sampling.top_p);
  repPen_->setValue(d.sampling.repetition_penalty);
  maxTok_->setValue(d.maxNewTokens);
  seed_->setValue(static_cast<int>(d.sampling.seed));
}

namespace {

// Text as it was written: escaped, its line breaks and runs of spaces kept.
QString pre(const QString& text) {
  return QStringLiteral("<span style='white-space:pre-wrap'>%1</span>").arg(text.toHtmlEscaped());
}

}  // namespace

QString ConversationWidget::turnHtml(int i) const {
  const TurnView& t = views_[static_cast<size_t>(i)];
  QString html =
      tr("<p style='margin-top:8px'><b style='color:#2f6b9a'>You</b>&nbsp; %1</p>").arg(t.user.toHtmlEscaped());
  html += tr("<p><b style='color:#59a14f'>Model</b>&nbsp; ");
  if (t.thought) {
    // The thinking: one line that opens and closes it, with what it cost in tokens and blocks.
    QString head = t.done || !t.content.isEmpty() ? tr("Reasoning") : tr("Thinking…");
    head += t.reasoningTokens == 1 ? tr(" · 1 token") : tr(" · %1 tokens").arg(t.reasoningTokens);
    if (t.reasoningBlocks >= 0)
      head += t.reasoningBlocks == 1 ? tr(" in 1 KV block") : tr(" in %1 KV blocks").arg(t.reasoningBlocks);
    if (t.done && !t.reasoningClosed) head += tr(" · unfinished");
    html += QStringLiteral("<a href='think:%1' style='color:#7a8290; text-decoration:none'>%2 %3</a></p>")
                .arg(i)
                .arg(t.expanded ? QStringLiteral("▾") : QStringLiteral("▸"), head.toHtmlEscaped());
    if (t.expanded)
      html +=
          QStringLiteral("<p style='color:#6b7280; font-style:italic; margin-left:14px'>%1</p>").arg(pre(t.reasoning));
    html += QStringLiteral("<p>%1</p>").arg(pre(t.content));
  } else {
    html += pre(t.content) + QStringLiteral("</p>");
  }
  if (!t.footer.isEmpty())
    html += QStringLiteral("<p><span style='color:#7a8290; font-size:small'>%1</span></p>").arg(t.footer);
  return html;
}

void ConversationWidget::render() const {
  renderDue_ = false;
  renderTimer_->stop();
  QScrollBar* bar = view_->verticalScrollBar();
  const bool atEnd = bar->value() >= bar->maximum() - 4;
  const int at = bar->value();
  QString html;
  for (int i = 0; i < static_cast<int>(views_.size()); ++i) html += turnHtml(i);
  view_->setHtml(html);
  bar->setValue(atEnd ? bar->maximum() : at);  // follow the reply; keep the place when reading back
}

void ConversationWidget::scheduleRender() {
  renderDue_ = true;
  if (!renderTimer_->isActive()) renderTimer_->start();
}

void ConversationWidget::setReasoningExpanded(int i, bool expanded) {
  if (i < 0 || i >= static_cast<int>(views_.size())) return;
  views_[static_cast<size_t>(i)].expanded = expanded;
  render();
}

void ConversationWidget::setBusy(quint64 tag) {
  tag_ = tag;
  const bool busy = tag != 0;
  sendBtn_->setEnabled(!busy);
  stopBtn_->setEnabled(busy);
  newBtn_->setEnabled(!busy);
  emit busyChanged(busy);
}

void ConversationWidget::send(const QString& rawText) {
  const QString text = rawText.trimmed();
  if (text.isEmpty() || isBusy()) return;
  if (!host_->hasEngine()) {
    status_->setText(tr("<span style='color:#c62828'>No model is loaded yet.</span>"));
    return;
  }
  const SamplingParams sp = samplingParams();
  TurnView v;
  v.user = text;
  views_.push_back(v);
  render();
  view_->verticalScrollBar()->setValue(view_->verticalScrollBar()->maximum());
  input_->clear();
  seq_ = -1;
  setBusy(host_->submitChat(history_, text, sp, maxTok_->value()));
  status_->setText(tr("Waiting for the engine…"));
}

SamplingParams ConversationWidget::samplingParams() const {
  SamplingParams sp;  // greedy
  sp.seed = static_cast<uint64_t>(seed_->value());
  sp.logit_bias = logitBias_;
  if (greedy_->isChecked()) return sp;
  sp.temperature = static_cast<float>(temp_->value());
  sp.top_k = topK_->value();
  sp.top_p = static_cast<float>(topP_->value());
  sp.repetition_penalty = static_cast<float>(repPen_->value());
  return sp;
}

void ConversationWidget::stop() {
  if (seq_ >= 0) host_->cancel(seq_);
}

void ConversationWidget::newConversation() {
  if (isBusy()) return;
  history_ = ChatHistory{};
  turns_ = 0;
  last_.reset();
  views_.clear();
  render();
  status_->setText(tr("New conversation."));
}

void ConversationWidget::engineRebuilt(bool sameModel) {
  if (isBusy()) setBusy(0);  // the worker reported the in-flight turn as cancelled
  if (!sameModel && !history_.empty()) {
    // Token ids of another model's vocabulary mean nothing to this one.
    newConversation();
    status_->setText(tr("A different model was loaded; the conversation starts over."));
  } else if (!history_.empty()) {
    status_->setText(tr("The engine was rebuilt: the prefix cache is empty, so the next turn recomputes its prompt."));
  }
}

void ConversationWidget::onSubmitted(quint64 tag, qint64 seq, int promptTokens) {
  if (tag != tag_ || tag == 0) return;
  seq_ = seq;
  status_->setText(tr("Generating (sequence %1, prompt %2 tokens)…").arg(seq).arg(promptTokens));
}

void ConversationWidget::onToken(qint64 seq, const QString& piece) {
  if (seq != seq_ || tag_ == 0 || views_.empty()) return;
  views_.back().content += piece;
  scheduleRender();
}

void ConversationWidget::onReasoning(qint64 seq, const QString& piece, int tokens) {
  if (seq != seq_ || tag_ == 0 || views_.empty()) return;
  TurnView& v = views_.back();
  v.thought = true;
  v.reasoning += piece;
  v.reasoningTokens = tokens;
  scheduleRender();
}

void ConversationWidget::onFinished(const TurnStats& t) {
  if (t.tag != tag_ || tag_ == 0) return;
  last_ = t;
  ++turns_;
  // Even a cancelled turn's tokens are in the cache, so the next turn continues from them.
  if (!t.tokens.empty() && t.state != QLatin1String("rejected")) recordTurn(t);
  const double pct = t.promptTokens ? 100.0 * t.cachedTokens / t.promptTokens : 0.0;
  QString line = tr("prompt %1 tok · <b>%2 cached</b> (%3%) · generated %4")
                     .arg(t.promptTokens)
                     .arg(t.cachedTokens)
                     .arg(pct, 0, 'f', 0)
                     .arg(t.generated);
  if (t.ttftMs >= 0) line += tr(" · TTFT %1 ms").arg(t.ttftMs, 0, 'f', t.ttftMs < 10 ? 2 : 1);
  if (t.tokensPerS > 0) line += tr(" · %1 tok/s").arg(t.tokensPerS, 0, 'f', 0);
  if (t.preemptions) line += tr(" · preempted %1×").arg(t.preemptions);
  if (t.state != QLatin1String("finished")) line += QStringLiteral(" · <b>%1</b>").arg(t.state.toHtmlEscaped());
  if (!t.error.isEmpty()) line += QStringLiteral(" · %1").arg(t.error.toHtmlEscaped());
  if (t.id >= 0) line += tr(" · <a href='story:%1'>story</a>").arg(t.id);  // why this much was cached
  if (t.chatTurn && !t.chatTurn->note.empty())
    line += QStringLiteral("<br><span style='color:%1'>%2</span>")
                .arg(t.chatTurn->fell_back ? QStringLiteral("#c62828") : QStringLiteral("#7a8290"),
                     QString::fromStdString(t.chatTurn->note).toHtmlEscaped());
  if (!views_.empty()) {
    TurnView& v = views_.back();
    v.done = true;
    v.footer = line;
    if (t.reasoningTokens > 0) {  // the request story's count: the thinking's tokens and blocks
      v.thought = true;
      v.reasoningTokens = t.reasoningTokens;
      v.reasoningBlocks = t.reasoningBlocks;
      v.reasoningClosed = t.reasoningClosed;
    }
  }
  render();
  status_->setText(tr("Turn %1 done. History: %2 tokens.").arg(turns_).arg(history_.tokens.size()));
  seq_ = -1;
  setBusy(0);
}

void ConversationWidget::recordTurn(const TurnStats& t) {
  if (t.chatTurn) {
    try {
      const TurnView* v = views_.empty() ? nullptr : &views_.back();
      // The message keeps the reply's content and, apart, its reasoning, as a client sends them.
      chat_commit(history_, *t.chatTurn, v ? v->content.toStdString() : std::string(), t.tokens,
                  v && v->thought ? std::optional<std::string>(v->reasoning.toStdString()) : std::nullopt);
      return;
    } catch (const std::invalid_argument&) {}  // not this turn's tokens: keep them, as below
  }
  history_.tokens = t.tokens;
  history_.rendered = ChatRendered{};
}

QString ConversationWidget::transcript() const {
  if (renderDue_) render();
  return view_->toPlainText();
}

// ---------------------------------------------------------------- tabs

ChatPanel::ChatPanel(EngineHost* host, QWidget* parent) : QWidget(parent), host_(host) {
  tabs_ = new QTabWidget;
  tabs_->setTabsClosable(true);
  tabs_->setDocumentMode(true);
  auto* add = new QToolButton;
  add->setText(QStringLiteral("+"));
  add->setToolTip(tr("Open another conversation; conversations generate at the same time and share the KV pool."));
  tabs_->setCornerWidget(add, Qt::TopRightCorner);
  template_ = new QLabel;
  template_->setWordWrap(true);
  template_->setContentsMargins(4, 2, 4, 0);
  template_->setToolTip(
      tr("How chat turns are written for this model: the GGUF's own tokenizer.chat_template, rendered by "
         "kvscope's Jinja engine as transformers renders it; where it cannot render, the built-in family "
         "recognised in it (ChatML, Llama 3, Gemma, Phi-3, Mistral, Llama 2). A model without one (a base "
         "model) continues plain text. kvscope-cli chat --chat-template NAME|FILE picks one explicitly."));
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 0, 0, 0);
  v->addWidget(template_);
  v->addWidget(tabs_);
  connect(host_, &EngineHost::modelLoaded, this, &ChatPanel::showTemplate);
  if (host_->hasEngine()) showTemplate(host_->modelInfo());
  connect(add, &QToolButton::clicked, this, [this] { tabs_->setCurrentWidget(addConversation()); });
  connect(tabs_, &QTabWidget::tabCloseRequested, this, [this](int i) {
    auto* c = conversation(i);
    if (tabs_->count() <= 1 || !c) return;
    c->stop();
    tabs_->removeTab(i);
    c->deleteLater();
  });
  addConversation();
}

void ChatPanel::showTemplate(const ModelInfo& info) {
  QString html = tr("<span style='color:#7a8290'>Template:</span> %1").arg(info.chatTemplate.toHtmlEscaped());
  if (!info.chatTemplateWarning.isEmpty())
    html += QStringLiteral("<br><span style='color:#c62828'>%1</span>").arg(info.chatTemplateWarning.toHtmlEscaped());
  template_->setText(html);
}

QString ChatPanel::templateText() const {
  QTextDocument doc;
  doc.setHtml(template_->text());
  return doc.toPlainText();
}

ConversationWidget* ChatPanel::addConversation() {
  auto* c = new ConversationWidget(host_, defaults_);
  const int i = tabs_->addTab(c, tr("Chat %1").arg(++created_));
  connect(c, &ConversationWidget::storyRequested, this, &ChatPanel::storyRequested);
  connect(c, &ConversationWidget::busyChanged, this, [this, c](bool busy) {
    const int idx = tabs_->indexOf(c);
    if (idx >= 0)
      tabs_->setTabText(idx,
                        tabs_->tabText(idx).remove(QStringLiteral(" ●")) + (busy ? QStringLiteral(" ●") : QString()));
  });
  (void)i;
  return c;
}

ConversationWidget* ChatPanel::current() const { return qobject_cast<ConversationWidget*>(tabs_->currentWidget()); }
ConversationWidget* ChatPanel::conversation(int i) const { return qobject_cast<ConversationWidget*>(tabs_->widget(i)); }
int ChatPanel::count() const { return tabs_->count(); }

void ChatPanel::setSamplingDefaults(const SamplingDefaults& d) {
  defaults_ = d;
  for (int i = 0; i < count(); ++i)
    if (auto* c = conversation(i); c && !c->isBusy() && c->turns() == 0) c->setSamplingDefaults(d);
}

void ChatPanel::engineRebuilt(bool sameModel) {
  for (int i = 0; i < count(); ++i)
    if (auto* c = conversation(i)) c->engineRebuilt(sameModel);
}

}  // namespace kvscope::ui
