#pragma once
// The engine's home thread. EngineThreadWorker owns the Model and the Engine and is the only code that
// touches them (with the plain helpers it owns: SeqStreams, ScenarioReplay, FrameQueue, and the
// pure functions of engine_reports.h and quality_eval.h); it lives on its own QThread (see EngineHost), takes commands as queued calls and
// sends immutable snapshots (through a mutex-guarded queue, see frames_), streamed tokens and
// finished turns out as queued signals — the Mandelbrot-example pattern: no shared mutable state
// but two atomic flags (stop, frame wanted) and that queue; the UI thread never waits on a step.
//
// Stepping is driven by a zero-interval timer instead of a loop so that commands (cancel, pause,
// a new chat message) interleave with steps: each timer tick runs exactly one Engine::step()
// (through the WorkloadRunner while a scenario replays, so the GUI and kvscope-cli share one
// replay core). While it steps, the snapshots go out at the pace of the UI's frame clock
// (EngineHost asks with requestFrame()); the worker itself keeps no clock.
#include <QObject>
#include <QTimer>
#include <atomic>
#include <memory>

#include "chat/chat_template_choice.h"
#include "engine/engine.h"
#include "model/model.h"
#include "run/workload_runner.h"
#include "serve/serving_queue.h"
#include "engine_bridge/backend_choice.h"
#include "engine_bridge/frame_queue.h"
#include "engine_bridge/quality_eval.h"
#include "engine_bridge/request_story_types.h"
#include "engine_bridge/scenario_replay.h"
#include "engine_bridge/seq_streams.h"
#include "engine_bridge/ui_types.h"
#include "engine_bridge/workload_source.h"

namespace kvscope::ui {

class EngineThreadWorker : public QObject {
  Q_OBJECT
 public:
  explicit EngineThreadWorker(int nThreads = 0);
  ~EngineThreadWorker() override;

  // Thread-safe: asks a running step loop to stop at the next tick (used at shutdown).
  void requestStop() { stop_.store(true); }
  // Thread-safe: the UI is ready for its next frame; the step that comes next sends the newest
  // snapshot (with the events and text of every step since the previous one).
  void requestFrame() { frameWanted_.store(true); }
  // Thread-safe: the oldest snapshot (with its block events) that snapshotReady announced and
  // nobody took yet; empty pointers when none is waiting.
  std::pair<SnapshotPtr, EventBatch> takeSnapshot() { return frames_.take(); }

  // ---- commands: call these only on the worker's thread (EngineHost queues them) ----
  void loadModel(const QString& path, const EngineConfig& cfg);
  void applyConfig(const EngineConfig& cfg);          // rebuild the engine on the loaded model
  void setBackend(BackendChoice c) { backend_ = c; }  // used from the next load / rebuild on
  void submit(quint64 tag, const Request& r, std::shared_ptr<const ChatTurnPrompt> chatTurn = nullptr);
  // A chat turn in the model's chat template (core/chat chat_next_turn): prompt = history (all
  // previous turns' tokens) + the new turn's tokens, so the previous turns' full blocks come
  // straight from the prefix cache. The turn comes back in requestFinished's chatTurn.
  void submitChat(quint64 tag, const ChatHistory& history, const QString& text, const SamplingParams& sampling,
                  int maxNewTokens);
  // One prompt (BOS + encoded text), greedy; ignoreEos keeps it going to maxNewTokens.
  void submitText(quint64 tag, const QString& text, int maxNewTokens, bool ignoreEos, const QString& label);
  void cancel(SeqId id);
  void cancelAll();
  void runWorkload(const Scenario& w);
  void setPaused(bool paused);
  void singleStep();
  void setStepDelay(int ms);  // slow motion for teaching / screenshots
  // The compare panel's quality run: scores `text` (BOS + text, at most maxTokens tokens) with
  // this engine's KV settings on a separate, temporary engine; the live engine is untouched.
  // Runs to completion on this thread, reporting qualityProgress, then qualityFinished.
  void evaluateText(quint64 tag, const QString& text, int maxTokens);
  // Send the snapshot of every step instead of one per requested frame (panels that plot
  // per-step data, e.g. the no-KV-cache teaching run, must not miss a step).
  void setEveryStep(bool on) { everyStep_ = on; }
  // The Serve toggle: requests from this queue's HTTP threads join this engine's batch, beside
  // the chats and scenarios (nullptr: stop; the served requests still running are cancelled).
  // The queue follows engine rebuilds: requests running then end with an error.
  void setServing(std::shared_ptr<serve::ServingQueue> queue);
  // The story of request id (engine/request_story.h) as sentences: storyReady answers.
  void tellStory(qint64 id);

 signals:
  void modelLoading(const QString& what);
  void modelLoaded(const kvscope::ui::ModelInfo& info);
  void engineError(const QString& message);
  void submitted(quint64 tag, qint64 seq, int promptTokens);
  // New text of a sequence since its previous tokenStreamed: tokens are batched per delivered
  // snapshot (sent with each one and when the sequence finishes), not one signal per token.
  void tokenStreamed(qint64 seq, const QString& piece);
  // A reasoning reply's thinking, apart from its content (tokenStreamed), batched the same way;
  // `tokens`: how many generated tokens were thinking so far.
  void reasoningStreamed(qint64 seq, const QString& piece, int tokens);
  void requestFinished(const kvscope::ui::TurnStats& stats);
  // One per snapshot put in the hand-off queue: the receiver takes it with takeSnapshot().
  void snapshotReady();
  void workloadProgress(int done, int total);
  void runningChanged(bool stepping);  // the step loop started / went idle
  void pausedChanged(bool paused);
  void qualityProgress(quint64 tag, int done, int total);
  void qualityFinished(const kvscope::ui::QualityResult& result);
  void storyReady(const kvscope::ui::StoryText& story);

 private:
  void buildEngine(std::shared_ptr<const Model> model, const EngineConfig& cfg, const QString& path);
  void schedulePump();
  void pump();       // one timer tick: step once
  bool stepOnce();   // false: nothing left to step
  void afterStep();  // finishTurns, then deliverSnapshot(false)
  // Keeps the step's block events for the next snapshot and reports every sequence that
  // finished (its last text, requestFinished, workload progress).
  void finishTurns();
  void cancelQuietly(SeqId id);  // cancel without a snapshot of its own
  // Sends the newest snapshot now (force), or when the UI asked for a frame, or at once when
  // the step loop is not running (a command's effect, e.g. a cancel while paused, shows at once).
  void deliverSnapshot(bool force);
  void setRunning(bool r);
  void fail(const QString& what);
  void servingWake();  // an HTTP thread submitted or cancelled

  std::shared_ptr<serve::ServingQueue> serving_;

  FrameQueue frames_;  // the snapshot hand-off to the UI thread (see frame_queue.h)

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

  SeqStreams streams_;              // the sequences whose text goes to the UI (chats, scenario, text)
  void flushText(SeqId only = -1);  // sends the queued text as tokenStreamed; -1: every sequence
  std::vector<SeqId> finishedThisStep_;

  // The engine publishes a snapshot after every step; what goes to the UI is the newest one when
  // the UI's frame clock asks (frameWanted_), every one with everyStep_. The block events of the
  // steps in between are kept, not coalesced.
  std::atomic<bool> frameWanted_{false};
  bool everyStep_ = false;
  std::shared_ptr<std::vector<BlockEvent>> pendingEvents_;

  ScenarioReplay replay_;  // a scenario being replayed, stepped from pump()
};

}  // namespace kvscope::ui
