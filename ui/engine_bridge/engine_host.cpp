#include "engine_bridge/engine_host.h"

namespace kvscope::ui {

namespace {
constexpr int kFrameMs = 16;  // a 60 Hz display gains nothing from more snapshots
}

EngineHost::EngineHost(QObject* parent, int nThreads) : QObject(parent) {
  worker_ = new EngineThreadWorker(nThreads);
  worker_->moveToThread(&thread_);
  // The worker (and the Engine it owns) is destroyed on its own thread as the thread ends.
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);

  frameClock_.setInterval(kFrameMs);
  connect(&frameClock_, &QTimer::timeout, this, [this] { worker_->requestFrame(); });
  connect(worker_, &EngineThreadWorker::snapshotReady, this, [this] {
    auto [s, ev] = worker_->takeSnapshot();
    if (!s) return;
    latest_ = s;
    emit snapshot(s, ev);  // panels only store the pointer and schedule a repaint
  });
  connect(worker_, &EngineThreadWorker::modelLoading, this, [this](const QString& what) {
    loading_ = true;
    emit loadingChanged(true, what);
  });
  connect(worker_, &EngineThreadWorker::modelLoaded, this, [this](const ModelInfo& info) {
    info_ = info;
    loading_ = false;
    emit loadingChanged(false, QString());
    emit modelLoaded(info);
  });
  connect(worker_, &EngineThreadWorker::engineError, this, [this](const QString& msg) {
    if (loading_) {
      loading_ = false;
      emit loadingChanged(false, QString());
    }
    emit error(msg);
  });
  connect(worker_, &EngineThreadWorker::runningChanged, this, [this](bool r) {
    running_ = r;
    if (r) {
      worker_->requestFrame();  // the first frame of a run without waiting a tick
      frameClock_.start();
    } else
      frameClock_.stop();  // the worker sends the final state itself when it stops
  });
  connect(worker_, &EngineThreadWorker::pausedChanged, this, [this](bool p) { paused_ = p; });
  thread_.setObjectName(QStringLiteral("kvscope-engine"));
  thread_.start();
}

EngineHost::~EngineHost() { shutdown(); }

void EngineHost::shutdown() {
  if (down_) return;
  down_ = true;
  frameClock_.stop();
  worker_->requestStop();  // the step loop ends at the next tick
  thread_.quit();
  thread_.wait();
}

template <typename F>
void EngineHost::post(F&& f) {
  if (down_) return;
  QMetaObject::invokeMethod(worker_, std::forward<F>(f), Qt::QueuedConnection);
}

void EngineHost::loadModel(const QString& path, const EngineConfig& cfg) {
  loading_ = true;  // set now, not when the worker gets to it, so the UI shows busy at once
  emit loadingChanged(true, tr("Loading…"));
  post([w = worker_, path, cfg] { w->loadModel(path, cfg); });
}

void EngineHost::applyConfig(const EngineConfig& cfg) {
  loading_ = true;
  emit loadingChanged(true, tr("Rebuilding the engine…"));
  post([w = worker_, cfg] { w->applyConfig(cfg); });
}

void EngineHost::setServing(std::shared_ptr<serve::ServingQueue> queue) {
  post([w = worker_, q = std::move(queue)]() mutable { w->setServing(std::move(q)); });
}

void EngineHost::setBackend(BackendChoice c) {
  post([w = worker_, c] { w->setBackend(c); });
}

void EngineHost::requestStory(SeqId id) {
  post([w = worker_, id] { w->tellStory(id); });
}

quint64 EngineHost::submit(const Request& r) {
  const quint64 tag = nextTag_++;
  post([w = worker_, tag, r] { w->submit(tag, r); });
  return tag;
}

quint64 EngineHost::submitChat(const ChatHistory& history, const QString& text, const SamplingParams& sp,
                               int maxNewTokens) {
  const quint64 tag = nextTag_++;
  post([w = worker_, tag, history, text, sp, maxNewTokens] { w->submitChat(tag, history, text, sp, maxNewTokens); });
  return tag;
}

quint64 EngineHost::submitText(const QString& text, int maxNewTokens, bool ignoreEos, const QString& label) {
  const quint64 tag = nextTag_++;
  post([w = worker_, tag, text, maxNewTokens, ignoreEos, label] {
    w->submitText(tag, text, maxNewTokens, ignoreEos, label);
  });
  return tag;
}

quint64 EngineHost::evaluateText(const QString& text, int maxTokens) {
  const quint64 tag = nextTag_++;
  post([w = worker_, tag, text, maxTokens] { w->evaluateText(tag, text, maxTokens); });
  return tag;
}

void EngineHost::cancel(SeqId id) {
  post([w = worker_, id] { w->cancel(id); });
}
void EngineHost::cancelAll() {
  post([w = worker_] { w->cancelAll(); });
}
void EngineHost::runWorkload(const Scenario& wl) {
  post([w = worker_, wl] { w->runWorkload(wl); });
}
void EngineHost::setPaused(bool paused) {
  paused_ = paused;
  post([w = worker_, paused] { w->setPaused(paused); });
}
void EngineHost::singleStep() {
  post([w = worker_] { w->singleStep(); });
}
void EngineHost::setStepDelay(int ms) {
  post([w = worker_, ms] { w->setStepDelay(ms); });
}
void EngineHost::setEveryStep(bool on) {
  post([w = worker_, on] { w->setEveryStep(on); });
}

}  // namespace kvscope::ui
