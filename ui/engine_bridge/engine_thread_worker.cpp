#include "engine_bridge/engine_thread_worker.h"

#include <QElapsedTimer>
#include <QFileInfo>
#include <QThread>
#include <algorithm>
#include <exception>

#include "chat/chat_conversation.h"
#include "engine_bridge/engine_reports.h"

namespace kvscope::ui {

EngineThreadWorker::EngineThreadWorker(int nThreads)
    // Every core by default: measured on 2 cores (docs/engine.md, "Defaults: threads and
    // sampling"), one thread left the second core idle while the window's drawing needs little of it.
    : nThreads_(nThreads > 0 ? nThreads : std::max(1, QThread::idealThreadCount())),
      pendingEvents_(std::make_shared<std::vector<BlockEvent>>()) {
  qRegisterMetaType<kvscope::SnapshotPtr>();
  qRegisterMetaType<kvscope::ui::EventBatch>();
  qRegisterMetaType<kvscope::ui::ModelInfo>();
  qRegisterMetaType<kvscope::ui::TurnStats>();
  qRegisterMetaType<kvscope::ui::QualityResult>();
  qRegisterMetaType<kvscope::ui::StoryText>();
}

EngineThreadWorker::~EngineThreadWorker() {
  if (serving_) {
    serving_->set_wake({});  // no HTTP thread may post to this object from here on
    serving_->detach("the window is closing");
  }
}

void EngineThreadWorker::setServing(std::shared_ptr<serve::ServingQueue> queue) {
  if (serving_) {
    serving_->set_wake({});
    serving_->detach("serving was turned off in the window");
    if (engine_) afterStep();  // the cancelled requests leave the block map at once
  }
  serving_ = std::move(queue);
  if (!serving_) return;
  if (engine_) {
    serving_->attach(*engine_);
    servingWake();
  }
  serving_->set_wake(
      [this] { QMetaObject::invokeMethod(this, &EngineThreadWorker::servingWake, Qt::QueuedConnection); });
}

void EngineThreadWorker::servingWake() {
  if (!serving_ || !engine_) return;
  // Taken in at once, also while paused: a new request shows up waiting in the block map, and
  // a client that went away has its blocks freed now, not at the next step.
  if (serving_->intake()) afterStep();
  schedulePump();
}

void EngineThreadWorker::fail(const QString& what) {
  // An engine that threw mid-step may be inconsistent: stop stepping it, keep the window alive.
  paused_ = true;
  emit pausedChanged(true);
  setRunning(false);
  emit engineError(what);
}

void EngineThreadWorker::loadModel(const QString& path, const EngineConfig& cfg) {
  emit modelLoading(tr("Loading %1…").arg(QFileInfo(path).fileName()));
  std::shared_ptr<const Model> model;
  try {
    model = Model::load(path.toStdString());
  } catch (const std::exception& e) {
    emit engineError(tr("Could not load model %1:\n%2").arg(path, QString::fromUtf8(e.what())));
    return;
  }
  modelPath_ = path;
  vocab_ = build_vocab(*model);
  buildEngine(std::move(model), cfg, path);
}

void EngineThreadWorker::applyConfig(const EngineConfig& cfg) {
  if (!model_) {
    emit engineError(tr("No model is loaded yet; open a model file first."));
    return;
  }
  buildEngine(model_, cfg, modelPath_);
}

void EngineThreadWorker::buildEngine(std::shared_ptr<const Model> model, const EngineConfig& cfg, const QString& path) {
  emit modelLoading(
      tr("Building the engine (%1 KV pool)…")
          .arg(cfg.num_blocks > 0 ? tr("%1 blocks").arg(cfg.num_blocks) : tr("%1 MiB").arg(cfg.kv_memory_bytes >> 20)));
  std::unique_ptr<Engine> engine;
  try {
    // The Settings panel's Threads (EngineConfig::threads) wins over the window's default.
    if (cfg.threads > 0) nThreads_ = cfg.threads;
    engine = std::make_unique<Engine>(model, make_backend(backend_, model, nThreads_), cfg);
  } catch (const std::exception& e) {
    // Keep the previous engine running: a bad setting must not cost the user their session.
    emit engineError(tr("The engine refused these settings:\n%1").arg(QString::fromUtf8(e.what())));
    return;
  }
  // The old engine's requests die with it; tell their owners so no chat waits forever (after
  // the text they had generated).
  flushText();
  for (auto& [id, stream] : streams_.takeAll()) {
    TurnStats t;
    t.id = id;
    t.tag = stream.tag;
    t.state = QStringLiteral("cancelled");
    t.error = tr("the engine was rebuilt");
    t.tokens = stream.tokens;
    t.chatTurn = stream.chatTurn;
    emit requestFinished(t);
  }
  finishedThisStep_.clear();
  replay_.reset();  // it drives the old engine
  pendingEvents_ = std::make_shared<std::vector<BlockEvent>>();

  if (serving_) serving_->detach("the window's engine was rebuilt with new settings; retry the request");
  // The stories outlive the engine: a later lookup can tell that the old engine cached the same
  // tokens under another KV dtype.
  if (engine_) engine->use_story_log(engine_->story_log());
  engine_ = std::move(engine);
  model_ = std::move(model);
  engine_->set_callbacks(EngineCallbacks{[this](SeqId id, TokenId tok) {
                                           if (serving_ && serving_->on_token(id, tok))
                                             return;  // an HTTP request's token
                                           streams_.onToken(id, tok, model_->tokenizer.get());
                                         },
                                         [this](SeqId id) {
                                           if (serving_ && serving_->on_finished(id)) return;
                                           finishedThisStep_.push_back(id);
                                         }});
  if (serving_) serving_->attach(*engine_);

  ModelInfo info;
  info.path = path;
  info.description = QString::fromStdString(model_->describe());
  info.backend = QString::fromStdString(engine_->backend().name());
  info.kvSummary = QString::fromStdString(engine_->kv_summary());
  info.contextLength = engine_->config().sched.max_model_len;
  info.nVocab = model_->config.n_vocab;
  info.nLayer = model_->config.n_layer;
  info.nHeadKv = model_->config.n_head_kv;
  info.headDim = model_->config.head_dim;
  info.vocab = vocab_;
  info.config = engine_->config();
  info.modelConfig = model_->config;
  chatTemplate_ =
      model_->tokenizer ? choose_chat_template(*model_->file, *model_->tokenizer, "") : ChatTemplateChoice{};
  info.chatTemplate = QString::fromStdString(chatTemplate_.describe());
  info.chatTemplateWarning = QString::fromStdString(chatTemplate_.warning);
  info.chatTemplateChoice = chatTemplate_;
  info.model = model_;
  emit modelLoaded(info);
  deliverSnapshot(true);
  emit workloadProgress(0, 0);
  if (serving_) servingWake();  // requests that came while the engine was being built
}

void EngineThreadWorker::submit(quint64 tag, const Request& r, std::shared_ptr<const ChatTurnPrompt> chatTurn) {
  if (!engine_) {
    emit engineError(tr("No engine yet: load a model first."));
    return;
  }
  SeqId id = -1;
  try {
    id = engine_->submit(r);
  } catch (const std::exception& e) {
    emit engineError(tr("Request refused: %1").arg(QString::fromUtf8(e.what())));
    return;
  }
  SeqStreams::Stream& l = streams_.openChat(id, std::move(chatTurn));
  l.tokens = r.prompt;
  l.tag = tag;
  emit submitted(tag, id, static_cast<int>(r.prompt.size()));
  afterStep();  // a rejected request finishes inside submit()
  schedulePump();
}

void EngineThreadWorker::submitChat(quint64 tag, const ChatHistory& history, const QString& text,
                                    const SamplingParams& sampling, int maxNewTokens) {
  if (!engine_ || !model_->tokenizer) {
    emit engineError(tr("No engine yet: load a model first."));
    return;
  }
  // Later turns continue the same token stream (core/chat), so every earlier full block
  // hashes identically and is found in the prefix cache.
  std::shared_ptr<ChatTurnPrompt> turn;
  try {
    turn = std::make_shared<ChatTurnPrompt>(
        chat_next_turn(*model_->tokenizer, chatTemplate_, "", history, text.toStdString()));
  } catch (const std::exception& e) {
    emit engineError(tr("The chat template cannot write this turn: %1").arg(QString::fromUtf8(e.what())));
    return;
  }
  Request r;
  r.prompt = turn->tokens;
  r.stop_tokens = chat_stop_tokens(*model_->tokenizer, chatTemplate_);
  r.max_new_tokens = maxNewTokens;
  r.sampling = sampling;
  r.label = "chat";
  r.reasoning = turn->reasoning;  // its story counts the thinking's tokens and blocks
  submit(tag, r, std::move(turn));
}

void EngineThreadWorker::submitText(quint64 tag, const QString& text, int maxNewTokens, bool ignoreEos,
                                    const QString& label) {
  if (!engine_ || !model_->tokenizer) {
    emit engineError(tr("No engine yet: load a model first."));
    return;
  }
  Request r;
  r.prompt = model_->tokenizer->encode(text.toStdString(), true, false);
  r.max_new_tokens = maxNewTokens;
  r.ignore_eos = ignoreEos;
  r.label = label.toStdString();
  submit(tag, r);
}

void EngineThreadWorker::evaluateText(quint64 tag, const QString& text, int maxTokens) {
  QualityResult r;
  r.tag = tag;
  if (!engine_ || !model_->tokenizer) {
    r.error = tr("No engine yet: load a model first.");
    emit qualityFinished(r);
    return;
  }
  std::vector<TokenId> tokens = model_->tokenizer->encode(text.trimmed().toStdString(), true, false);
  if (maxTokens > 0 && static_cast<int>(tokens.size()) > maxTokens) tokens.resize(static_cast<size_t>(maxTokens));
  QElapsedTimer since;
  since.start();
  r = run_quality_eval(model_, tokens, eval_config_of(engine_->config(), nThreads_), [&](int done, int total) {
    if (since.elapsed() >= 50 || done == total) {  // a few updates a second is plenty
      emit qualityProgress(tag, done, total);
      since.restart();
    }
    return !stop_.load();
  });
  r.tag = tag;
  emit qualityFinished(r);
}

void EngineThreadWorker::tellStory(qint64 id) { emit storyReady(story_text(engine_.get(), vocab_, id)); }

void EngineThreadWorker::cancel(SeqId id) {
  if (!engine_) return;
  cancelQuietly(id);
  afterStep();
}

void EngineThreadWorker::cancelQuietly(SeqId id) {
  try {
    engine_->cancel(id);
  } catch (const std::exception& e) { emit engineError(QString::fromUtf8(e.what())); }
}

void EngineThreadWorker::cancelAll() {
  // Requests not yet submitted are dropped; they count as done so the run reaches its end.
  replay_.dropPending();
  if (!engine_) return;
  for (SeqId id : streams_.ids()) cancelQuietly(id);
  finishTurns();
  deliverSnapshot(true);  // one snapshot for all the cancels
}

void EngineThreadWorker::runWorkload(const Scenario& w) {
  if (!engine_) {
    emit engineError(tr("No engine yet: load a model first."));
    return;
  }
  replay_.start(
      *engine_, w,
      [this](const Request& q, const std::vector<SeqId>& ids) {
        for (SeqId id : ids) {
          streams_.open(id).tokens = q.prompt;
          emit submitted(0, id, static_cast<int>(q.prompt.size()));
        }
      },
      [this](int done, int total) { emit workloadProgress(done, total); });
  emit workloadProgress(0, replay_.total());
  schedulePump();
}

void EngineThreadWorker::setPaused(bool paused) {
  if (paused_ == paused) return;
  paused_ = paused;
  emit pausedChanged(paused);
  if (!paused)
    schedulePump();
  else {
    setRunning(false);
    deliverSnapshot(true);
  }
}

void EngineThreadWorker::singleStep() {
  if (!engine_) return;
  if (!paused_) setPaused(true);
  stepOnce();
  deliverSnapshot(true);  // teaching mode wants every step, not the coalesced stream
}

void EngineThreadWorker::setStepDelay(int ms) {
  stepDelayMs_ = std::max(0, ms);
  if (timer_) timer_->setInterval(stepDelayMs_);
}

void EngineThreadWorker::schedulePump() {
  if (!timer_) {
    // Created lazily so that it belongs to the worker's thread, not the one that built us.
    timer_ = new QTimer(this);
    timer_->setInterval(stepDelayMs_);
    connect(timer_, &QTimer::timeout, this, &EngineThreadWorker::pump);
  }
  if (engine_ && !paused_ && !stop_.load() && !timer_->isActive()) {
    timer_->start();
    setRunning(true);
  }
}

void EngineThreadWorker::pump() {
  if (stop_.load() || paused_ || !engine_) {
    timer_->stop();
    setRunning(false);
    return;
  }
  if (!stepOnce()) {
    timer_->stop();
    setRunning(false);
    if (serving_) serving_->on_idle();  // every served request ended: check the KV invariants
    deliverSnapshot(true);              // the final state of the run always reaches the UI
  }
}

bool EngineThreadWorker::stepOnce() {
  bool more = true;
  try {
    if (serving_) serving_->intake();
    if (replay_.active()) {
      // Submits what has arrived and steps the engine (chats included), or waits one short
      // slice for a request's arrival time; may throw on a prompt id outside the vocabulary.
      more = replay_.step() || engine_->has_work();
    } else if (engine_->has_work()) {
      engine_->step();
    } else {
      more = false;
    }
    if (serving_ && serving_->after_step()) more = more || engine_->has_work();
  } catch (const std::exception& e) {
    fail(tr("The engine stopped with an error:\n%1").arg(QString::fromUtf8(e.what())));
    return false;
  }
  afterStep();
  return more;
}

void EngineThreadWorker::afterStep() {
  finishTurns();
  deliverSnapshot(false);
}

void EngineThreadWorker::finishTurns() {
  // The engine has published this step's snapshot; its block events are kept here until the
  // next snapshot goes to the UI, so the captions see every step's events even when the UI
  // takes one snapshot of several steps.
  if (const std::vector<BlockEvent> evs = engine_->take_new_events(); !evs.empty()) {
    // Bounded: if the UI stalls, keep the newest events (the captions care about the present).
    auto& pe = *pendingEvents_;
    pe.insert(pe.end(), evs.begin(), evs.end());
    constexpr size_t kMaxPending = 20000;
    if (pe.size() > kMaxPending) pe.erase(pe.begin(), pe.end() - kMaxPending);
  }
  SnapshotPtr snap = finishedThisStep_.empty() ? nullptr : engine_->snapshot();
  for (SeqId id : finishedThisStep_) {
    std::optional<SeqStreams::Stream> stream = streams_.finish(id);  // its last text queued
    if (!stream) continue;
    TurnStats t = turn_stats(*engine_, id, snap.get());
    t.tag = stream->tag;
    t.tokens = std::move(stream->tokens);
    t.chatTurn = std::move(stream->chatTurn);
    // The engine's own token list is the authority (a preempted sequence is recomputed, not
    // re-streamed); fall back to what was streamed when it has been pruned.
    try {
      t.tokens = engine_->sequence(id).tokens;
    } catch (const std::exception&) {}
    flushText(id);  // the whole reply reaches the UI before its requestFinished
    replay_.sequenceFinished(id);
    emit requestFinished(t);
  }
  finishedThisStep_.clear();
}

void EngineThreadWorker::deliverSnapshot(bool force) {
  if (!engine_) return;
  // frameWanted_ is cleared only when it is used, so a frame asked for between two steps is
  // not lost.
  if (!force && !everyStep_ && running_ && !frameWanted_.exchange(false)) return;
  EventBatch batch = pendingEvents_;
  pendingEvents_ = std::make_shared<std::vector<BlockEvent>>();
  flushText();  // the text of the steps this snapshot shows
  // The published snapshot, or a fresh one if a command (submit, cancel) changed the state
  // since the last step.
  frames_.push(engine_->snapshot(), std::move(batch));
  emit snapshotReady();
}

void EngineThreadWorker::flushText(SeqId only) {
  streams_.flushText(
      [this](const SeqStreams::Text& t) {
        if (!t.reasoning.empty()) emit reasoningStreamed(t.id, QString::fromUtf8(t.reasoning), t.reasoningTokens);
        if (!t.content.empty()) emit tokenStreamed(t.id, QString::fromUtf8(t.content));
      },
      only);
}

void EngineThreadWorker::setRunning(bool r) {
  if (running_ == r) return;
  running_ = r;
  emit runningChanged(r);
}

}  // namespace kvscope::ui
