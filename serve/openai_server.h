#pragma once
// The OpenAI-compatible HTTP front end (cpp-httplib): /v1/completions, /v1/chat/completions
// (streamed as server-sent events or whole), /v1/models, /health, /metrics. Each HTTP thread
// parses and checks its request, hands it to the ServingQueue and relays what comes back on
// the request's channel; a streaming client that goes away cancels its request.
#include <memory>
#include <string>

#include "serve/serving_queue.h"
#include "serve/openai_request.h"

namespace kvscope::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";    // loopback unless asked otherwise
  int port = 8000;                   // 0: any free port (see bound_port())
  std::string api_key;               // non-empty: every endpoint but /health needs "Bearer KEY"
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int http_threads = 64;             // concurrent connections served (streams hold one each)
  int read_timeout_s = 5;            // a client that stalls mid-request is dropped after this
  size_t max_headers = 100;          // more get 431
};

class OpenAiServer {
 public:
  OpenAiServer(ServingQueue& queue, ServedModel model, ServerOptions opt);
  ~OpenAiServer();
  // Binds the listening socket; throws std::runtime_error when it cannot.
  void bind();
  int bound_port() const { return port_; }
  void run();              // serves until stop(); call bind() first
  bool listening() const;  // run() has started serving (any thread)
  void stop();             // from any thread (a signal handler's helper thread)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kvscope::serve
