#include "engine_bridge/workload_source.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <stdexcept>

#include "workload/builtin_scenarios.h"
#include "workload/generators.h"

namespace kvscope::ui {

namespace {

const QString kPoolPressure = QStringLiteral("pool-pressure");

// Many long replies at once: more KV than the GUI's default 256-block pool holds, so the
// scheduler has to preempt (and later recompute) sequences; the memory plot marks each one.
Scenario pool_pressure() {
  ManyShortChatsParams p;
  p.n_requests = 32;
  p.min_new_tokens = 200;
  p.max_new_tokens = 300;
  p.mean_arrival_gap = 1;
  p.seed = 11;
  Scenario s = many_short_chats(p);
  s.name = kPoolPressure.toStdString();
  s.description =
      "32 chats of 200-300 tokens each arriving together: more KV than a 256-block pool holds, "
      "so sequences are preempted and recomputed.";
  return s;
}

}  // namespace

QStringList scenario_dirs() {
  QStringList dirs;
  const QByteArray env = qgetenv("KVSCOPE_SCENARIO_DIR");
  if (!env.isEmpty()) dirs << QString::fromLocal8Bit(env);
  const QString app = QCoreApplication::applicationDirPath();
  dirs << app + QStringLiteral("/../resources/scenarios") << app + QStringLiteral("/../share/kvscope/scenarios");
#ifdef KVSCOPE_SOURCE_DIR
  dirs << QStringLiteral(KVSCOPE_SOURCE_DIR "/resources/scenarios");
#endif
  QStringList out;
  for (const QString& d : dirs) {
    const QString c = QDir(d).canonicalPath();
    if (!c.isEmpty() && !out.contains(c)) out << c;
  }
  return out;
}

QList<ScenarioEntry> scenario_entries() {
  QList<ScenarioEntry> out;
  QStringList names;
  for (const QString& d : scenario_dirs()) {
    for (const QFileInfo& fi : QDir(d).entryInfoList({QStringLiteral("*.json")}, QDir::Files, QDir::Name)) {
      if (names.contains(fi.completeBaseName())) continue;  // the first folder wins
      names << fi.completeBaseName();
      out.push_back({fi.completeBaseName(), fi.absoluteFilePath()});
    }
  }
  // Without a resources folder (an installed binary), fall back to the definitions in core.
  for (const Workload& w : builtin_scenarios()) {
    const QString n = QString::fromStdString(w.name);
    if (!names.contains(n)) {
      names << n;
      out.push_back({n, n});
    }
  }
  out.push_back({kPoolPressure + QObject::tr(" (generated)"), kPoolPressure});
  return out;
}

Scenario load_scenario(const QString& key) {
  if (key == kPoolPressure) return pool_pressure();
  if (QFileInfo(key).isFile()) return load_workload(key.toStdString());
  // A bare name: a file of that name in a scenario folder, else the built-in definition.
  for (const QString& d : scenario_dirs()) {
    const QString f = QDir(d).filePath(key + QStringLiteral(".json"));
    if (QFileInfo(f).isFile()) return load_workload(f.toStdString());
  }
  for (Workload& w : builtin_scenarios())
    if (QString::fromStdString(w.name) == key) return std::move(w);
  throw std::runtime_error("unknown scenario '" + key.toStdString() + "'");
}

int scenario_request_count(const Scenario& s) {
  int n = 0;
  for (const WorkloadRequest& r : s.requests) n += std::max(1, r.n);
  return n;
}

}  // namespace kvscope::ui
