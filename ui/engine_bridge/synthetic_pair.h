#pragma once
// Two small synthetic models side by side, for the teaching panels that compare an idea on the
// real engine (Latent KV, Hybrid state): writes both models once into a temporary folder
// (kvscope's synthetic writer, random weights), runs each on its own engine with the same
// settings and one request, and reports each engine's snapshots and the end of both runs. A
// panel says what to submit once a model has loaded and what to draw; the plumbing (hosts,
// errors, which request is whose) lives here.
#include <QObject>
#include <QTemporaryDir>
#include <array>
#include <functional>
#include <memory>

#include "engine_bridge/engine_host.h"
#include "model/synthetic_model.h"

namespace kvscope::ui {

class SyntheticPair : public QObject {
  Q_OBJECT
 public:
  struct Side {
    QString name;  // "latent", "qwen35": in messages
    QString file;  // file name inside the temporary folder
    SyntheticSpec spec;
  };
  // Called on the UI thread once side i's model has loaded: submit its request, return the tag.
  using Submit = std::function<quint64(int i, EngineHost& host, const ModelInfo& info)>;

  SyntheticPair(std::array<Side, 2> sides, Submit submit, QObject* parent = nullptr);
  ~SyntheticPair() override;

  // Writes the models (once) and loads both with cfg, every step's snapshot delivered. False,
  // with *why, when a run is in progress or a model cannot be written.
  bool start(const EngineConfig& cfg, QString* why);
  void shutdown();
  bool isRunning() const { return (runs_[0].active || runs_[1].active) && !(done(0) && done(1)); }
  bool done(int i) const { return runs_[static_cast<size_t>(i)].done; }
  bool finished() const { return done(0) && done(1) && error_.isEmpty(); }
  const QString& error() const { return error_; }
  const QString& name(int i) const { return sides_[static_cast<size_t>(i)].name; }

 signals:
  void snapshot(int i, const kvscope::SnapshotPtr& s);
  void loaded(int i, const kvscope::ui::ModelInfo& info);
  void stopped();  // both runs finished, or one failed (error() says why)

 private:
  struct Run {
    std::unique_ptr<EngineHost> host;
    bool active = false, done = false;
    quint64 tag = 0;
  };
  bool writeModels(QString* why);
  void ensureHost(int i);
  void fail(const QString& why);

  std::array<Side, 2> sides_;
  Submit submit_;
  std::array<Run, 2> runs_;
  std::unique_ptr<QTemporaryDir> dir_;
  QString error_;
};

}  // namespace kvscope::ui
