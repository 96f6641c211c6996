#pragma once
// Scrapes an engine's /metrics every interval on its own thread (cpp-httplib, connect and
// read timeouts), parses it with parse_prometheus_text and keeps the cache numbers under one
// name whichever engine sent them (vLLM's vllm:*, SGLang's sglang:*). A hanging endpoint, a
// refused connection, an error status or an answer that is no Prometheus text (an HTML page)
// is counted and shown, never fatal.
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "attach/metrics_summary.h"

namespace kvscope::attach {

class MetricsScraper {
 public:
  MetricsScraper(std::string url, int interval_ms = 1000, int timeout_ms = 1000);  // throws on a bad URL
  ~MetricsScraper();                                                               // stops the thread
  ScrapeStats stats() const;
  void scrape_once();  // what the thread does each interval

 private:
  std::string host_, path_;
  int port_ = 80;
  int interval_ms_, timeout_ms_;
  mutable std::mutex mu_;
  ScrapeStats stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvscope::attach
