#include "engine_bridge/synthetic_pair.h"

namespace kvscope::ui {

SyntheticPair::SyntheticPair(std::array<Side, 2> sides, Submit submit, QObject* parent)
    : QObject(parent), sides_(std::move(sides)), submit_(std::move(submit)) {}

SyntheticPair::~SyntheticPair() { shutdown(); }

void SyntheticPair::shutdown() {
  for (Run& r : runs_)
    if (r.host) r.host->shutdown();
}

bool SyntheticPair::writeModels(QString* why) {
  if (dir_ && dir_->isValid()) return true;
  dir_ = std::make_unique<QTemporaryDir>();
  if (!dir_->isValid()) {
    *why = tr("cannot create a temporary folder for the models");
    dir_.reset();
    return false;
  }
  for (const Side& s : sides_) {
    try {
      write_synthetic_model(s.spec, dir_->filePath(s.file).toStdString());
    } catch (const std::exception& e) {
      *why = tr("cannot write the %1 model: %2").arg(s.name, QString::fromStdString(e.what()));
      dir_.reset();
      return false;
    }
  }
  return true;
}

void SyntheticPair::fail(const QString& why) {
  error_ = why;
  for (Run& r : runs_) r.active = false;
  emit stopped();
}

void SyntheticPair::ensureHost(int i) {
  Run& r = runs_[static_cast<size_t>(i)];
  if (r.host) return;
  r.host = std::make_unique<EngineHost>(nullptr);
  EngineHost* h = r.host.get();
  connect(h, &EngineHost::modelLoaded, this, [this, i](const ModelInfo& info) {
    Run& run = runs_[static_cast<size_t>(i)];
    if (!run.active) return;
    run.tag = submit_(i, *run.host, info);
    emit loaded(i, info);
  });
  connect(h, &EngineHost::snapshot, this, [this, i](const SnapshotPtr& s, const EventBatch&) {
    if (s && runs_[static_cast<size_t>(i)].active) emit snapshot(i, s);
  });
  connect(h, &EngineHost::error, this, [this, i](const QString& msg) {
    if (runs_[static_cast<size_t>(i)].active) fail(tr("%1: %2").arg(name(i), msg));
  });
  connect(h->worker(), &EngineThreadWorker::requestFinished, this, [this, i](const TurnStats& t) {
    Run& run = runs_[static_cast<size_t>(i)];
    if (!run.active || t.tag != run.tag) return;
    run.done = true;
    if (t.state != QLatin1String("finished"))
      return fail(tr("%1: the request was %2 %3").arg(name(i), t.state, t.error));
    if (done(0) && done(1)) emit stopped();
  });
}

bool SyntheticPair::start(const EngineConfig& cfg, QString* why) {
  QString err;
  if (isRunning())
    err = tr("A run is in progress.");
  else if (!writeModels(&err) && err.isEmpty())
    err = tr("cannot write the models");
  if (!err.isEmpty()) {
    if (why) *why = err;
    return false;
  }
  error_.clear();
  for (int i = 0; i < 2; ++i) {
    Run& r = runs_[static_cast<size_t>(i)];
    ensureHost(i);
    r.active = true;
    r.done = false;
    r.tag = 0;
    r.host->setEveryStep(true);  // every step: a coalesced snapshot could miss the last ones
    r.host->loadModel(dir_->filePath(sides_[static_cast<size_t>(i)].file), cfg);
  }
  return true;
}

}  // namespace kvscope::ui
