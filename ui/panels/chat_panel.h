#pragma once
// Multi-turn chat with the loaded model. Each tab is one conversation; several can generate at
// once (they share the pool and the prefix cache). Turn n+1's prompt is every token of turns
// 1..n (prompts and replies, exactly as they sit in the KV cache) plus the new text, so the
// earlier turns' full blocks are prefix-cache hits; each turn reports how many were reused.
// Turns are written in the model's chat template (core/chat: the file's tokenizer.chat_template
// through the Jinja engine, a built-in family where it fails; plain continuation for base
// models), named above the tabs.
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

namespace kvscope::ui {

class ConversationWidget : public QWidget {
  Q_OBJECT
 public:
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
  QString transcript() const;
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
  void onFinished(const TurnStats& t);
  void recordTurn(const TurnStats& t);  // the finished turn joins history_
  void appendHtmlBlock(const QString& html);
  void setBusy(quint64 tag);

  EngineHost* host_;
  QTextBrowser* view_;
  QLineEdit* input_;
  QPushButton *sendBtn_, *stopBtn_, *newBtn_, *greedy_;
  QDoubleSpinBox *temp_, *topP_, *repPen_;
  QSpinBox *topK_, *maxTok_, *seed_;
  QLabel* status_;

  ChatHistory history_;  // the finished turns: messages and every token
  QString reply_;        // the reply of the turn in flight, as streamed
  quint64 tag_ = 0;      // the submit in flight (0: idle)
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
