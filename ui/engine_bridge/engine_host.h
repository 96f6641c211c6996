#pragma once
// The UI thread's handle on one EngineThreadWorker: starts its QThread, forwards commands as queued
// calls (so the caller never blocks on a step or a model load), keeps the newest snapshot for
// panels that open late, and owns the UI's snapshot pace: while the engine steps, its frame
// clock asks the worker for one snapshot per display frame (kFrameMs), so a faster engine is
// coalesced instead of keeping the UI thread busy. Its destructor stops the worker at the next
// step boundary and joins the thread: closing the window mid-run never hangs longer than one
// engine step.
#include <QObject>
#include <QThread>
#include <QTimer>

#include "engine_bridge/engine_thread_worker.h"

namespace kvscope::ui {

class EngineHost : public QObject {
  Q_OBJECT
 public:
  explicit EngineHost(QObject* parent = nullptr, int nThreads = 0);
  ~EngineHost() override;

  EngineThreadWorker* worker() const { return worker_; }  // for connecting to its signals only
  SnapshotPtr latest() const { return latest_; }
  const ModelInfo& modelInfo() const { return info_; }
  bool hasEngine() const { return static_cast<bool>(info_.vocab); }
  bool isLoading() const { return loading_; }
  bool isRunning() const { return running_; }
  bool isPaused() const { return paused_; }

  void loadModel(const QString& path, const EngineConfig& cfg);
  void applyConfig(const EngineConfig& cfg);
  void setBackend(BackendChoice c);  // takes effect at the next loadModel / applyConfig
  // Returns the tag that the submitted / requestFinished signals will carry.
  quint64 submit(const Request& r);
  quint64 submitChat(const ChatHistory& history, const QString& text, const SamplingParams& sp, int maxNewTokens);
  quint64 submitText(const QString& text, int maxNewTokens, bool ignoreEos, const QString& label);
  quint64 evaluateText(const QString& text, int maxTokens);  // see EngineThreadWorker::evaluateText
  void cancel(SeqId id);
  void cancelAll();
  void runWorkload(const Scenario& w);
  void setPaused(bool paused);
  void singleStep();
  void setStepDelay(int ms);
  void setEveryStep(bool on);  // every step's snapshot instead of one per frame (EngineThreadWorker::setEveryStep)
  void setServing(std::shared_ptr<serve::ServingQueue> queue);  // EngineThreadWorker::setServing
  void requestStory(SeqId id);                                  // EngineThreadWorker::storyReady answers
  void shutdown();                                              // idempotent; also done by the destructor

 signals:
  // Re-emitted on the UI thread after the host has recorded them.
  void snapshot(const kvscope::SnapshotPtr& snap, const kvscope::ui::EventBatch& events);
  void modelLoaded(const kvscope::ui::ModelInfo& info);
  void loadingChanged(bool loading, const QString& what);
  void error(const QString& message);

 private:
  template <typename F>
  void post(F&& f);

  QThread thread_;
  EngineThreadWorker* worker_ = nullptr;
  SnapshotPtr latest_;
  // Runs while the worker steps; each tick asks for the next snapshot (a flag the worker reads
  // after its step: the UI thread never waits on it). When the UI thread is busy the ticks
  // come later, and so do the snapshots.
  QTimer frameClock_;
  ModelInfo info_;
  quint64 nextTag_ = 1;
  bool loading_ = false, running_ = false, paused_ = false, down_ = false;
};

}  // namespace kvscope::ui
