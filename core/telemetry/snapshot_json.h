#pragma once
// Everything in a Snapshot (and block events) as JSON, for export and for tests.
#include <nlohmann/json.hpp>

#include "telemetry/snapshot.h"

namespace kvscope {

nlohmann::json to_json(const BlockEvent& e);
nlohmann::json to_json(const Snapshot& s);

}  // namespace kvscope
