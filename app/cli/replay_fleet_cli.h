#pragma once
// `kvscope-cli replay` beyond one instance's hit curve: --instances/--router, --tiers and
// --timed (run/replay_fleet.h, run/timed_replay.h). cmd_replay.cpp reads the trace and hands over.
#include <set>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "run/trace_replay.h"

namespace kvscope::cli {

extern const char* kReplayFleetHelp;
// The option names this part reads (cmd_replay.cpp accepts them).
std::set<std::string> replay_fleet_options();
std::set<std::string> replay_fleet_flags();
bool replay_wants_fleet(const Args& a);
// Prints the results; adds "fleet", "pooled" and (timed) "timed" to `out`.
void run_replay_fleet(const Args& a, std::span<const TraceRequest> reqs, const ReplayOptions& opt, nlohmann::json& out);

}  // namespace kvscope::cli
