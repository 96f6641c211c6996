#pragma once
// Where the workload runner's scenarios come from: the JSON files in resources/scenarios/ (the
// same files `kvscope-cli run` replays), the core's built-in scenario definitions when the
// files are not around, one generated "pool-pressure" scenario, or any JSON file on disk.
#include <QString>
#include <QStringList>
#include <optional>

#include "workload/workload.h"

namespace kvscope::ui {

using Scenario = kvscope::Workload;

// Every scenario the runner offers, as (display name, key): key is a file path or a built-in name.
struct ScenarioEntry {
  QString name;
  QString key;
};
QList<ScenarioEntry> scenario_entries();
// Loads a scenario by key (path or built-in name). Throws std::runtime_error naming the problem.
Scenario load_scenario(const QString& key);
// Folders searched for *.json scenarios: $KVSCOPE_SCENARIO_DIR, next to the binary, the source tree.
QStringList scenario_dirs();
// Requests a scenario submits in total (n > 1 counts each sample).
int scenario_request_count(const Scenario& s);

}  // namespace kvscope::ui
