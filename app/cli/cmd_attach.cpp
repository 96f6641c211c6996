// kvscope-cli attach: subscribes to running engines' KV-event streams (vLLM, SGLang,
// TensorRT-LLM: ZMQ PUB, optional replay ROUTER), scrapes their /metrics, and after --seconds
// writes what it reconstructed (attach/attach_report.h) as JSON. SIGINT/SIGTERM end it early,
// with the report. --record FILE also writes the wire as it arrived (attach/event_recording.h);
// --play FILE rebuilds the same report from such a recording instead of attaching.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>

#include "attach/attach_report.h"
#include "attach/event_recording.h"
#include "attach/recording_playback.h"
#include "attach/zmq_subscriber.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "model/tokenizer.h"

namespace kvscope::cli {
namespace {

std::atomic<bool> g_stop{false};

const char* kAttachHelp =
    "kvscope-cli attach --endpoint tcp://HOST:5557 [--endpoint tcp://HOST2:5557 ...] [--dp-ranks N]\n"
    "  [--replay tcp://HOST:5558 ...] [--metrics http://HOST:8000/metrics ...] [--topic T]\n"
    "  [--tokenizer MODEL.gguf] [--replay-timeout-ms 3000] --seconds S [--json-out F] [--record FILE]\n"
    "kvscope-cli attach --play FILE [--until SECONDS] [--tokenizer MODEL.gguf] [--json-out F]\n"
    "One SUB socket per instance; --dp-ranks N expands each endpoint (and its replay) to ports\n"
    "base..base+N-1 as vLLM publishes data-parallel ranks. The i-th --replay and --metrics belong\n"
    "to the i-th --endpoint. Prints one summary line per instance; --json-out writes everything.\n"
    "--record FILE writes every message and replay answer as it arrives (JSON lines, docs/attach.md);\n"
    "--play FILE rebuilds the attach from it, up to --until seconds after its start (default: all),\n"
    "and reports as the live attach did (no /metrics: they are not recorded).\n";

std::vector<attach::InstanceSpec> instance_specs(const Args& a) {
  const std::vector<std::string> eps = a.all("endpoint"), replays = a.all("replay");
  if (eps.empty()) throw UsageError("give at least one --endpoint tcp://HOST:PORT");
  if (replays.size() > eps.size()) throw UsageError("more --replay than --endpoint");
  const int64_t ranks = a.i64("dp-ranks", 1);
  if (ranks < 1 || ranks > 1024) throw UsageError("--dp-ranks must be in 1..1024");
  std::vector<attach::InstanceSpec> out;
  for (size_t i = 0; i < eps.size(); ++i) {
    attach::InstanceSpec base{eps[i], i < replays.size() ? replays[i] : "", a.str("topic"), 0, static_cast<int>(i)};
    try {
      for (auto& s : attach::expand_dp_ranks(base, static_cast<int>(ranks))) out.push_back(std::move(s));
    } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  }
  return out;
}

attach::TokenText token_text(const std::string& path) {
  if (path.empty()) return {};
  std::shared_ptr<GgufFile> file = GgufFile::open(path);
  std::shared_ptr<Tokenizer> tok(Tokenizer::from_gguf(*file));
  return [tok](const std::vector<int64_t>& ids) {
    std::string s;
    for (int64_t id : ids)
      s += id >= 0 && id < tok->n_vocab() ? tok->token_to_piece(static_cast<TokenId>(id)) : "\xEF\xBF\xBD";
    return s;
  };
}

void print_summary(const attach::AttachedStreams& z) {
  for (size_t i = 0; i < z.size(); ++i) {
    const auto& s = z.stream(i);
    const auto& c = s.counters();
    std::cout << "attach: " << z.spec(i).endpoint << ": " << s.view().blocks().size() << " cached blocks, " << c.batches
              << " batches, " << c.gaps << " gaps, " << c.replayed << " replayed, " << c.lost_batches << " lost"
              << (s.stale() ? " (stale)" : "") << "\n";
  }
}

void write_report(const Args& a, const nlohmann::json& report) {
  if (!a.has("json-out")) return;
  std::ofstream f(a.str("json-out"));
  // Token text may end inside a UTF-8 sequence (a block boundary cuts it): replace, not throw.
  f << report.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (!f) throw std::runtime_error("cannot write " + a.str("json-out"));
}

// --play: the recording up to --until, through the streams a live attach uses.
int play_attach(const Args& a) {
  const std::string path = a.str("play");
  for (const char* live : {"endpoint", "replay", "metrics", "seconds", "record", "dp-ranks", "topic"})
    if (a.has(live)) throw UsageError(std::string("--play rebuilds a recorded attach: --") + live + " does not apply");
  std::shared_ptr<attach::Recording> rec;
  try {
    rec = std::make_shared<attach::Recording>(attach::read_recording_file(path));
  } catch (const attach::RecordingError& e) { throw std::runtime_error(path + ": " + e.what()); }
  const double until = a.f64("until", rec->end() - rec->started);
  if (!(until >= 0)) throw UsageError("--until takes seconds after the recording's start (>= 0)");
  const auto text = token_text(a.str("tokenizer"));
  attach::RecordingPlayback p(rec);
  p.seek(rec->started + until);
  std::cout << "attach: played " << p.lines_applied() << " of " << rec->lines.size() << " recorded lines, "
            << p.time() - p.start() << " s of " << rec->end() - rec->started << " s"
            << (rec->cut_off ? " (its last line was cut off and skipped)" : "") << "\n";
  print_summary(p);
  nlohmann::json report = attach::attach_report(p, {}, text, p.time() - p.start(), p.timelines());
  report["recording"] = {{"file", path},
                         {"started", rec->started},
                         {"lines", rec->lines.size()},
                         {"lines_applied", p.lines_applied()},
                         {"cut_off", rec->cut_off},
                         {"replay_mismatches", p.replay_mismatches()}};
  write_report(a, report);
  return 0;
}

}  // namespace

int cmd_attach(int argc, char** argv, int first) {
  const Args a(argc, argv, first,
               {"endpoint", "dp-ranks", "replay", "metrics", "topic", "tokenizer", "seconds", "json-out",
                "replay-timeout-ms", "record", "play", "until"},
               {"help"});
  if (a.has("help")) {
    std::cout << kAttachHelp;
    return 0;
  }
  if (a.has("play")) return play_attach(a);
  if (a.has("until")) throw UsageError("--until belongs to --play");
  const double seconds = a.f64("seconds", 10);
  if (!(seconds > 0 && seconds <= 7 * 86400)) throw UsageError("--seconds must be in (0, 604800]");
  const int64_t replay_ms = a.i64("replay-timeout-ms", 3000);
  if (replay_ms < 1 || replay_ms > 600000) throw UsageError("--replay-timeout-ms must be in 1..600000");
  const auto text = token_text(a.str("tokenizer"));
  std::vector<std::unique_ptr<attach::MetricsScraper>> scrapers;
  for (const std::string& url : a.all("metrics")) {
    try {
      scrapers.push_back(std::make_unique<attach::MetricsScraper>(url));
    } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  }
  std::unique_ptr<attach::EventRecorder> recorder;
  if (a.has("record")) recorder = std::make_unique<attach::EventRecorder>(a.str("record"));
  std::unique_ptr<attach::ZmqAttach> zp;
  try {
    zp = std::make_unique<attach::ZmqAttach>(instance_specs(a), static_cast<int>(replay_ms), recorder.get());
  } catch (const std::invalid_argument& e) { throw UsageError(e.what()); }
  attach::ZmqAttach& z = *zp;
  signal(SIGINT, [](int) { g_stop = true; });
  signal(SIGTERM, [](int) { g_stop = true; });
  std::cout << "attach: subscribed to " << z.size() << " instance" << (z.size() == 1 ? "" : "s") << std::endl;
  // Memory over time: a tick every 250 ms, the first right after the late attach's replay.
  std::vector<attach::InstanceTimeline> timelines;
  const auto scraped = [&] {
    std::vector<attach::ScrapeStats> m;
    for (auto& s : scrapers) m.push_back(s->stats());
    return m;
  };
  const auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  attach::tick_timelines(timelines, z, scraped(), unix_now());
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  auto next_tick = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
  while (!g_stop && std::chrono::steady_clock::now() < end) {
    z.poll_for(100);
    if (std::chrono::steady_clock::now() < next_tick) continue;
    next_tick = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
    attach::tick_timelines(timelines, z, scraped(), unix_now());
  }
  const std::vector<attach::ScrapeStats> metrics = scraped();
  attach::tick_timelines(timelines, z, metrics, unix_now());
  print_summary(z);
  if (recorder) {
    recorder->flush();
    std::cout << "attach: recorded " << recorder->lines() << " lines to " << a.str("record") << "\n";
  }
  write_report(a, attach::attach_report(z, metrics, text, seconds, timelines));
  return 0;
}

}  // namespace kvscope::cli
