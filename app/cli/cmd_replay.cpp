// kvscope-cli replay: prefix-cache hit curves of a request trace (Mooncake's or kvscope's
// JSON lines) through the engine's own block pool and prefix cache, no model compute
// (run/trace_replay.h; docs/replay.md).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/replay_fleet_cli.h"
#include "kv/kv_planner.h"
#include "run/trace_replay.h"
#include "run/trace_workload.h"

namespace kvscope::cli {

namespace {

const char* kReplayHelp =
    "kvscope-cli replay --trace FILE|- [--format mooncake|kvscope] [--block-size B] [--capacity-tokens C1,C2,...]\n"
    "  [--json-out F] [--max-line-bytes N] [--skip-bad] [--threads N]\n"
    "  [--vocab-size V --workload-out W.json]\n"
    "  Runs the trace's requests in order through the engine's block pool and prefix cache (no model):\n"
    "  each is admitted (prefix lookup), its prompt allocated, then finished and freed (its blocks stay\n"
    "  cached, evictable LRU). One pass per capacity; prints the hit curve, --json-out writes it as JSON.\n"
    "  --format: mooncake (default; timestamp, input_length, output_length, hash_ids of 512-token blocks)\n"
    "     or kvscope (timestamp_ms, input_length, output_length, hash_ids, block_size, session_id)\n"
    "  --block-size: must divide the trace's block size (default 512)\n"
    "  --capacity-tokens: pool sizes in tokens, 0 = unbounded; 128K = 131072, 1M = 1048576 (default 0)\n"
    "  --threads: capacities replayed at once (default 1; each needs its own pool's memory)\n"
    "  --max-line-bytes: longer lines are malformed (default 1048576)\n"
    "  --skip-bad: count malformed lines (skipped_lines) instead of stopping at the first (exit 2)\n"
    "  --vocab-size: synthesized token ids below V (default 2^31); --workload-out: the same prompts as a\n"
    "     kvscope workload (one at a time, max_tokens 1) for `kvscope-cli run`, to compare with the engine\n"
    "  docs/replay.md: the semantics and measured curves.\n";

std::vector<int64_t> capacities_option(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item == "0") {
      out.push_back(0);
      continue;
    }
    const auto n = parse_token_count(item);
    if (!n) throw UsageError("--capacity-tokens '" + item + "' is not a token count (e.g. 0, 65536 or 4M)");
    out.push_back(*n);
  }
  if (out.empty()) throw UsageError("--capacity-tokens is empty");
  return out;
}

// Malformed input is the caller's mistake: a usage error (exit 2) that names the line.
std::vector<TraceRequest> load_trace(const std::string& path, const TraceReaderOptions& opt, int64_t& skipped,
                                     std::vector<std::string>& skipped_errors) {
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) throw UsageError("cannot read trace '" + path + "'");
  }
  std::istream& in = path == "-" ? std::cin : file;
  try {
    return read_trace(in, opt, &skipped, &skipped_errors);
  } catch (const TraceError& e) { throw UsageError(e.what()); }
}

nlohmann::json point_json(const ReplayPoint& p) {
  return {{"capacity_tokens", p.capacity_tokens},
          {"pool_blocks", p.pool_blocks},
          {"hit_ratio", p.hit_ratio()},
          {"hit_tokens", p.hit_tokens},
          {"prompt_tokens", p.prompt_tokens},
          {"evictions", p.evictions},
          {"orphaned", p.orphaned},
          {"requests", p.requests},
          {"truncated_requests", p.truncated_requests},
          {"seconds", p.seconds}};
}

void print_curve(const std::vector<ReplayPoint>& curve, int32_t bs) {
  std::printf("%16s %12s %10s %16s %16s %12s\n", "capacity_tokens", "pool_blocks", "hit_ratio", "hit_tokens",
              "prompt_tokens", "evictions");
  for (const ReplayPoint& p : curve)
    std::printf("%16lld %12d %10.4f %16llu %16llu %12llu\n", static_cast<long long>(p.capacity_tokens), p.pool_blocks,
                p.hit_ratio(), static_cast<unsigned long long>(p.hit_tokens),
                static_cast<unsigned long long>(p.prompt_tokens), static_cast<unsigned long long>(p.evictions));
  std::printf("(block size %d; capacity 0 = unbounded)\n", bs);
}

}  // namespace

int cmd_replay(int argc, char** argv, int first) {
  std::set<std::string> options = {"trace",          "format",     "block-size",   "capacity-tokens", "json-out",
                                   "max-line-bytes", "vocab-size", "workload-out", "threads"};
  std::set<std::string> flags = {"skip-bad", "help"};
  options.merge(replay_fleet_options());
  flags.merge(replay_fleet_flags());
  const Args a(argc, argv, first, options, flags);
  if (a.has("help") || !a.has("trace")) {
    std::cout << kReplayHelp << kReplayFleetHelp;
    return a.has("help") ? 0 : 2;
  }
  TraceReaderOptions ro;
  try {
    ro.format = parse_trace_format(a.str("format", "mooncake"));
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  ro.max_line_bytes = a.i64("max-line-bytes", 1 << 20);
  if (ro.max_line_bytes <= 0 || ro.max_line_bytes > (int64_t{1} << 30))
    throw UsageError("--max-line-bytes must be in 1..1073741824");
  ro.skip_bad = a.has("skip-bad");
  ReplayOptions opt;
  const int64_t bs = a.i64("block-size", 512);
  if (bs <= 0 || bs > (1 << 20)) throw UsageError("--block-size must be in 1..1048576");
  opt.block_size = static_cast<int32_t>(bs);
  opt.vocab_size = a.i64("vocab-size", opt.vocab_size);
  const int64_t threads = a.i64("threads", 1);
  if (threads < 1 || threads > 256) throw UsageError("--threads must be in 1..256");
  opt.threads = static_cast<int32_t>(threads);
  if (opt.vocab_size <= 0 || opt.vocab_size > (int64_t{1} << 31)) throw UsageError("--vocab-size must be in 1..2^31");
  const std::vector<int64_t> caps = capacities_option(a.str("capacity-tokens", "0"));

  int64_t skipped = 0;
  std::vector<std::string> skipped_errors;
  const std::vector<TraceRequest> reqs = load_trace(a.str("trace"), ro, skipped, skipped_errors);
  try {
    check_replay_block_size(reqs, opt.block_size);
  } catch (const TraceError& e) { throw UsageError(e.what()); }
  if (a.has("workload-out")) {
    try {
      save_workload(a.str("workload-out"), trace_to_workload(reqs, opt.vocab_size, "replay"));
    } catch (const TraceError& e) { throw UsageError(e.what()); }
  }
  nlohmann::json out = {{"trace", a.str("trace")},      {"format", a.str("format", "mooncake")},
                        {"block_size", opt.block_size}, {"requests", reqs.size()},
                        {"skipped_lines", skipped},     {"skipped_errors", skipped_errors}};
  const auto t0 = std::chrono::steady_clock::now();
  if (replay_wants_fleet(a)) {
    run_replay_fleet(a, reqs, opt, out);
  } else {
    const std::vector<ReplayPoint> curve = replay_curve(reqs, caps, opt);
    print_curve(curve, opt.block_size);
    out["curve"] = nlohmann::json::array();
    for (const ReplayPoint& p : curve) out["curve"].push_back(point_json(p));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out["replay_seconds"] = secs;
  std::printf("%zu requests, %lld skipped lines, %.2f s\n", reqs.size(), static_cast<long long>(skipped), secs);
  for (const std::string& e : skipped_errors) std::fprintf(stderr, "kvscope-cli replay: skipped %s\n", e.c_str());
  if (a.has("json-out")) {
    std::ofstream f(a.str("json-out"));
    if (!f) throw std::runtime_error("cannot write " + a.str("json-out"));
    f << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace kvscope::cli
