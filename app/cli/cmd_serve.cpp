// kvscope-cli serve: the engine behind an OpenAI-compatible HTTP server (serve/), with vLLM's
// Prometheus metrics at /metrics. Loopback by default; SIGINT/SIGTERM stop it cleanly.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "chat/chat_template_choice.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/reasoning_option.h"
#include "serve/engine_worker.h"
#include "serve/kv_event_publisher.h"
#include "serve/kv_event_tracker.h"
#include "serve/openai_server.h"

namespace kvscope::cli {

int cmd_serve(int argc, char** argv, int first) {
  const Args a(argc, argv, first,
               with_engine_options({"host", "port", "api-key", "served-model-name", "chat-template", "max-queued",
                                    "http-threads", "max-n", "kv-events-endpoint", "kv-events-replay",
                                    "kv-events-topic", "record", "reasoning-parser"}),
               {"help"});
  if (a.has("help")) {
    std::cout
        << "kvscope-cli serve [--model M] [--host 127.0.0.1] [--port 8000] [--api-key KEY]\n"
           "  [--served-model-name NAME] [--chat-template NAME|FILE] [--max-queued N] [--http-threads N] [--max-n N]\n"
           "  [engine options as run/chat: --threads --block-size --kv-blocks | --kv-memory --kv-dtype --kv-group --kivi-residual\n"
           "   --prefix-caching --max-running --max-batched-tokens --max-model-len --backend ...]\n"
           "Endpoints: POST /v1/completions, POST /v1/chat/completions (stream true/false),\n"
           "GET /v1/models, GET /health, GET /metrics (Prometheus, vLLM's names).\n"
           "Chat: the model's own Jinja chat template (--chat-template NAME: a built-in family, FILE: a Jinja\n"
           "template); a request's chat_template_kwargs object adds template variables (e.g. enable_thinking),\n"
           "its tools reach the template, and messages may carry tool_calls, tool results and reasoning.\n"
           "  [--reasoning-parser auto|none|think|harmony]  replies of reasoning models come back with their\n"
           "  thinking apart, in `reasoning` and `reasoning_content` (auto: from the vocabulary's markers).\n"
           "  [--kv-events-endpoint tcp://127.0.0.1:5557 [--kv-events-replay tcp://127.0.0.1:5558] [--kv-events-topic T]]\n"
           "KV events: vLLM's ZMQ stream (PUB: topic, 8-byte big-endian seq, msgpack KVEventBatch).\n"
           "--port 0 picks a free port (printed). --api-key: every endpoint but /health needs\n"
           "'Authorization: Bearer KEY'. --max-queued: sequences in flight before new requests get 503.\n"
           "--record FILE: every served sequence as a line of a kvscope trace (kvscope-cli replay --format kvscope).\n";
    return 0;
  }
  serve::ServerOptions opt;
  opt.host = a.str("host", "127.0.0.1");
  const int64_t port = a.i64("port", 8000);
  if (port < 0 || port > 65535) throw UsageError("--port must be in 0..65535");
  opt.port = static_cast<int>(port);
  opt.api_key = a.str("api-key");
  if (a.has("api-key") && opt.api_key.empty()) throw UsageError("--api-key must not be empty");
  const int64_t threads = a.i64("http-threads", 64);
  if (threads < 1 || threads > 4096) throw UsageError("--http-threads must be in 1..4096");
  opt.http_threads = static_cast<int>(threads);
  serve::WorkerLimits limits;
  const int64_t mq = a.i64("max-queued", 256);
  if (mq < 1) throw UsageError("--max-queued must be at least 1");
  limits.max_queued = static_cast<int32_t>(mq);
  const int64_t max_n = a.i64("max-n", 16);
  if (max_n < 1 || max_n > 256) throw UsageError("--max-n must be in 1..256");

  // SIGINT/SIGTERM are taken by one waiting thread (blocked everywhere else, so every thread
  // created from here on (the backend's workers too) inherits the mask), which stops the server; run() then returns.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  LoadedModel lm = load_model(a);
  const Tokenizer& tok = *lm.model->tokenizer;
  ChatTemplateChoice tmpl;
  try {
    tmpl = choose_chat_template(*lm.model->file, tok, a.str("chat-template"));
  } catch (const ChatTemplateError& e) { throw UsageError(std::string("--chat-template: ") + e.what()); }
  apply_reasoning_option(a, tmpl);
  auto engine = make_engine(a, lm.model);
  std::cerr << lm.model->describe() << "\n"
            << engine->kv_summary() << "\n"
            << "chat template: " << tmpl.describe() << "\n"
            << "reasoning: " << describe_reasoning(a, tmpl) << "\n";
  if (!tmpl.warning.empty()) std::cerr << "warning: " << tmpl.warning << "\n";

  serve::ServedModel sm;
  sm.name = a.str("served-model-name", std::filesystem::path(lm.path).stem().string());
  sm.aliases = {lm.path};
  if (a.has("model")) sm.aliases.push_back(a.str("model"));
  sm.tokenizer = &tok;
  sm.chat_template = tmpl;
  sm.max_model_len = engine->config().sched.max_model_len;
  sm.n_vocab = lm.model->config.n_vocab;
  sm.max_n = static_cast<int>(max_n);
  sm.max_piece_bytes = serve::longest_piece_bytes(tok);

  // KV events: the tracker reads the cache on the engine thread after each step; the
  // publisher's thread sends. Both outlive the worker (declared first, destroyed last).
  std::unique_ptr<serve::KvEventPublisher> publisher;
  std::unique_ptr<serve::KvEventTracker> tracker;
  if (a.has("kv-events-endpoint")) {
    if (!engine->paged_kv())
      throw UsageError("--kv-events-endpoint needs the paged KV cache (it reports prefix-cache blocks)");
    try {
      publisher = std::make_unique<serve::KvEventPublisher>(a.str("kv-events-endpoint"), a.str("kv-events-replay"),
                                                            a.str("kv-events-topic"));
    } catch (const std::runtime_error& e) { throw UsageError(e.what()); }
    tracker = std::make_unique<serve::KvEventTracker>(*engine);
    auto now_s = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    };
    // A subscriber that knew an earlier run of this server starts from an empty cache.
    publisher->publish({now_s(), {serve::KvAllBlocksCleared{}}, 0});
    std::cout << "kvscope serve: KV events on " << publisher->endpoint();
    if (!publisher->replay_endpoint().empty()) std::cout << " (replay " << publisher->replay_endpoint() << ")";
    std::cout << std::endl;
  } else if (a.has("kv-events-replay") || a.has("kv-events-topic")) {
    throw UsageError("--kv-events-replay and --kv-events-topic need --kv-events-endpoint");
  }
  const int32_t block_size = engine->config().block_size;
  serve::EngineWorker worker(std::move(engine), limits);
  if (a.has("record")) {
    // Set before the server binds: no request can reach the engine thread before it.
    try {
      worker.queue().set_recorder(std::make_shared<serve::TrafficRecorder>(a.str("record"), block_size));
    } catch (const std::runtime_error& e) { throw UsageError(e.what()); }
  }
  if (publisher) {
    worker.set_step_observer([&publisher, &tracker, now_s = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    }](const Engine& e) {
      std::vector<serve::KvEvent> evs = tracker->update(e);
      if (!evs.empty()) publisher->publish({now_s(), std::move(evs), 0});
    });
  }
  serve::OpenAiServer server(worker.queue(), sm, opt);
  try {
    server.bind();
  } catch (const std::runtime_error& e) { throw UsageError(e.what()); }
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    server.stop();
  });
  // One line on stdout that scripts wait for (with --port 0 it carries the chosen port).
  std::cout << "kvscope serve: listening on http://" << opt.host << ":" << server.bound_port() << " (model " << sm.name
            << ")" << std::endl;
  server.run();
  kill(getpid(), SIGTERM);  // wakes the waiter if run() ended on its own
  waiter.join();
  std::cerr << "kvscope serve: stopped\n";
  return 0;
}

}  // namespace kvscope::cli
