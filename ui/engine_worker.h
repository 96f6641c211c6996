#pragma once
// The engine's home thread. EngineWorker owns the Model and the Engine and is the only code that
// touches them; it lives on its own QThread (see EngineHost), takes commands as queued calls and
// sends immutable snapshots, streamed tokens and finished turns out as queued signals — the
// Mandelbrot-example pattern: no shared mutable state, the UI thread never waits on a step.
//
// Stepping is driven by a zero-interval timer instead of a loop so that commands (cancel, pause,
// a new chat message) interleave with steps: each timer tick runs exactly one Engine::step().
#include <QElapsedTimer>
#include <QObject>
#include <QTimer>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "chat/chat_template_choice.h"
#include "engine/engine.h"
#include "model/model.h"
#include "backend_choice.h"
#include "quality_eval.h"
#include "ui_types.h"
#include "workload_source.h"

namespace kvscope::ui {

class EngineWorker : public QObject {
  Q_OBJECT
 public:
  explicit EngineWorker(int nThreads = 0);
  ~EngineWorker() override;

  // Thread-safe: asks a running step loop to stop at the next tick (used at shutdown).
  void requestStop() { stop_.store(true); }

  // ---- commands: call these only on the worker's thread (EngineHost queues them) ----
  void loadModel(const QString& path, const EngineConfig& cfg);
  void applyConfig(const EngineConfig& cfg);        // rebuild the engine on the loaded model
  void setBackend(BackendChoice c) { backend_ = c; }  // used from the next load / rebuild on
  void submit(quint64 tag, const Request& r);
  // A chat turn in the model's chat template: prompt = history (all previous turns' tokens) +
  // the new turn's tokens, so the previous turns' full blocks come straight from the prefix cache.
  void submitChat(quint64 tag, const std::vector<TokenId>& history, const QString& text,
                  const SamplingParams& sampling, int maxNewTokens);
  // One prompt (BOS + encoded text), greedy; ignoreEos keeps it going to maxNewTokens.
  void submitText(quint64 tag, const QString& text, int maxNewTokens, bool ignoreEos, const QString& label);
  void cancel(SeqId id);
  void cancelAll();
  void runWorkload(const Scenario& w);
  void setPaused(bool paused);
  void singleStep();
  void setStepDelay(int ms);                          // slow motion for teaching / screenshots
  void ackSnapshot();                                 // the UI consumed the last snapshot
  // The compare panel's quality run: scores `text` (BOS + text, at most maxTokens tokens) with
  // this engine's KV settings on a separate, temporary engine; the live engine is untouched.
  // Runs to completion on this thread, reporting qualityProgress, then qualityFinished.
  void evaluateText(quint64 tag, const QString& text, int maxTokens);
  // Deliver the snapshot of every step instead of coalescing them (panels that plot per-step
  // data, e.g. the no-KV-cache teaching run, must not miss a step).
  void setEveryStep(bool on) { everyStep_ = on; }

 signals:
  void modelLoading(const QString& what);
  void modelLoaded(const kvscope::ui::ModelInfo& info);
  void engineError(const QString& message);
  void submitted(quint64 tag, qint64 seq, int promptTokens);
  // New text of a sequence since its previous tokenStreamed: tokens are batched per delivered
  // frame (sent with each snapshot and when the sequence finishes), not one signal per token.
  void tokenStreamed(qint64 seq, const QString& piece);
  void requestFinished(const kvscope::ui::TurnStats& stats);
  void snapshotReady(const kvscope::SnapshotPtr& snap, const kvscope::ui::EventBatch& events);
  void workloadProgress(int done, int total);
  void runningChanged(bool stepping);                 // the step loop started / went idle
  void pausedChanged(bool paused);
  void qualityProgress(quint64 tag, int done, int total);
  void qualityFinished(const kvscope::ui::QualityResult& result);

 private:
  void buildEngine(std::shared_ptr<const Model> model, const EngineConfig& cfg, const QString& path);
  void schedulePump();
  void pump();                                         // one timer tick: release arrivals, step once
  bool stepOnce();
  void afterStep();
  void deliverSnapshot(bool force);
  void releaseArrivals();
  void setRunning(bool r);
  void fail(const QString& what);
  TurnStats statsFor(SeqId id, const Snapshot* snap) const;

  int nThreads_;
  BackendChoice backend_ = BackendChoice::Auto;
  std::atomic<bool> stop_{false};
  QTimer* timer_ = nullptr;
  int stepDelayMs_ = 0;
  bool paused_ = false;
  bool running_ = false;

  std::shared_ptr<const Model> model_;
  ChatTemplateChoice chatTemplate_;  // chosen at load from tokenizer.chat_template (core/chat)
  std::unique_ptr<Engine> engine_;
  QString modelPath_;
  VocabPtr vocab_;

  // What the worker streams of one engine sequence until it finishes: its tokens so far
  // (prompt + generated), the UTF-8 decoder of its text, and its submitter's tag.
  struct SeqStream {
    std::vector<TokenId> tokens;
    Utf8StreamDecoder decoder;
    quint64 tag = 0;
  };
  std::unordered_map<SeqId, SeqStream> streams_;
  // Decoded text not yet sent to the UI, per sequence, in the order it became available.
  std::vector<std::pair<SeqId, std::string>> pendingText_;
  void queueText(SeqId id, std::string text);
  void flushText(SeqId only = -1);   // -1: every sequence
  std::vector<SeqId> finishedThisStep_;

  // Snapshot coalescing: at most one snapshot in flight to the UI; steps taken meanwhile only
  // accumulate their events, and the newest snapshot goes out when the UI acks.
  // And at most one every kMinSnapshotIntervalMs (a 60 Hz display gains nothing from more): the
  // UI thread used to take ~180 snapshots a second on a fast model, and the engine builds each.
  static constexpr int kMinSnapshotIntervalMs = 16;
  bool inFlight_ = false;
  bool dirty_ = false;
  bool everyStep_ = false;
  QElapsedTimer sinceSnapshot_;
  QTimer* snapshotTimer_ = nullptr;  // delivers a deferred snapshot once the interval is over
  std::shared_ptr<std::vector<BlockEvent>> pendingEvents_;

  // Workload replay. A follow-up chat turn waits for its conversation's previous turn and is
  // built from that turn's full token sequence (build_turn_prompt), as kvscope-cli replays it.
  struct Pending {
    WorkloadRequest request;
    size_t order = 0;
  };
  struct Conversation {
    int nextTurn = 0;                  // the turn that may be submitted next
    bool running = false;              // a turn of it is in the engine
    bool broken = false;               // a turn was rejected or cancelled: later turns are skipped
    std::vector<TokenId> lastTokens;   // the finished turn's prompt + generated tokens
  };
  bool releasable(const Pending& p) const;
  void submitWorkloadRequest(const WorkloadRequest& r);
  void workloadRequestDone(SeqId id, const TurnStats& t);
  std::vector<Pending> arrivals_;      // not yet submitted, in arrival order
  std::unordered_map<SeqId, std::string> workloadSeqs_;  // live workload sequence -> conversation
  std::map<std::string, Conversation> conversations_;
  int workloadTotal_ = 0, workloadDone_ = 0;
  int64_t workloadStep_ = 0;
  QElapsedTimer workloadClock_;  // since runWorkload(): for arrival_s
  double workloadSeconds() const { return workloadClock_.isValid() ? static_cast<double>(workloadClock_.elapsed()) / 1000.0 : 0.0; }
};

}  // namespace kvscope::ui
