#pragma once
// Multi-turn chat with the loaded model. Each tab is one conversation; several can generate at
// once (they share the pool and the prefix cache). Turn n+1's prompt is every token of turns
// 1..n (prompts and replies, exactly as they sit in the KV cache) plus the new text, so the
// earlier turns' full blocks are prefix-cache hits; each turn reports how many were reused.
// Turns are written in the model's chat template (core/chat: the file's tokenizer.chat_template
// through the Jinja engine, a built-in family where it fails; plain continuation for base
// models), named above the tabs. A reasoning model's thinking (split out on the engine's thread,
// core/chat/reasoning_parser.h) shows as a collapsible part of its reply, collapsed by default,
// with how many tokens and KV blocks it took.
#include <QWidget>
#include <optional>

#include "engine_bridge/engine_host.h"
#include "engine_bridge/sampling_defaults.h"

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTextBrowser;
class QTimer;

namespace kvscope::ui {

class ConversationWidget : public QWidget {
  Q_OBJECT
 public:
  // One turn as the view shows it.
  struct TurnView {
    QString user;
    QString reasoning, content;  // the reply, its thinking apart
    bool thought = false;        // the reply has a reasoning part
    bool expanded = false;       // its reasoning is shown (collapsed by default)
    int reasoningTokens = 0;     // so far; once done, the request story's count
    int reasoningBlocks = -1;    // KV blocks holding them (-1: not known yet)
    bool reasoningClosed = true;
    bool done = false;
    QString footer;  // the stats line (HTML), once done
  };

  ConversationWidget(EngineHost* host, const SamplingDefaults& defaults, QWidget* parent = nullptr);

  void send(const QString& text);
  void stop();
  void newConversation();
  bool isBusy() const { return tag_ != 0; }
  SeqId activeSeq() const { return seq_; }
  int turns() const { return turns_; }
  const std::vector<TokenId>& history() const { return history_.tokens; }
  const ChatHistory& chatHistory() const { return history_; }  // the messages too
  const std::optional<TurnStats>& lastStats() const { return last_; }
  QString transcript() const;  // the view's plain text
  const std::vector<TurnView>& turnViews() const { return views_; }
  // Shows or hides turn i's reasoning (what clicking its "Reasoning" line does).
  void setReasoningExpanded(int i, bool expanded);
  // Added to the logits of the next turns (OpenAI's logit_bias): for tests and scripted demos
  // that need a random-weight model to write chosen tokens, such as </think>.
  void setLogitBias(std::vector<std::pair<int32_t, float>> bias) { logitBias_ = std::move(bias); }
  QLineEdit* input() const { return input_; }
  // "Greedy (reproducible)": checked, the next turns use temperature 0 with no top-k, top-p or
  // penalty (the same reply every time); unchecked, the sampling fields as they were.
  QPushButton* greedyButton() const { return greedy_; }
  SamplingParams samplingParams() const;  // what the next turn is sent with
  void setSamplingDefaults(const SamplingDefaults& d);
  void engineRebuilt(bool sameModel);

 signals:
  void busyChanged(bool busy);
  // The "story" link under a turn was clicked: show request seq's KV story.
  void storyRequested(qint64 seq);

 private:
  void onSubmitted(quint64 tag, qint64 seq, int promptTokens);
  void onToken(qint64 seq, const QString& piece);
  void onReasoning(qint64 seq, const QString& piece, int tokens);
  void onFinished(const TurnStats& t);
  void recordTurn(const TurnStats& t);  // the finished turn joins history_
  void setBusy(quint64 tag);
  void scheduleRender();
  void render() const;  // the document from views_ (const: the view is drawn, nothing else changes)
  QString turnHtml(int i) const;

  EngineHost* host_;
  QTextBrowser* view_;
  QLineEdit* input_;
  QPushButton *sendBtn_, *stopBtn_, *newBtn_, *greedy_;
  QDoubleSpinBox *temp_, *topP_, *repPen_;
  QSpinBox *topK_, *maxTok_, *seed_;
  QLabel* status_;

  ChatHistory history_;             // the finished turns: messages and every token
  std::vector<TurnView> views_;     // what the view shows, turn by turn
  QTimer* renderTimer_;             // streamed text is drawn a few times a second, not per token
  mutable bool renderDue_ = false;  // views_ changed since the last render
  std::vector<std::pair<int32_t, float>> logitBias_;
  quint64 tag_ = 0;  // the submit in flight (0: idle)
  SeqId seq_ = -1;
  int turns_ = 0;
  std::optional<TurnStats> last_;
};

class ChatPanel : public QWidget {
  Q_OBJECT
 public:
  ChatPanel(EngineHost* host, QWidget* parent = nullptr);
  ConversationWidget* current() const;
  ConversationWidget* conversation(int i) const;
  int count() const;
  ConversationWidget* addConversation();
  void setSamplingDefaults(const SamplingDefaults& d);
  void engineRebuilt(bool sameModel);
  QString templateText() const;  // "Template: chatml (detected in tokenizer.chat_template)"

 signals:
  void storyRequested(qint64 seq);  // from any conversation's "story" link

 private:
  void showTemplate(const ModelInfo& info);

  EngineHost* host_;
  QLabel* template_;
  QTabWidget* tabs_;
  SamplingDefaults defaults_;
  int created_ = 0;
};

}  // namespace kvscope::ui
