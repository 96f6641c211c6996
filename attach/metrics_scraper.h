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

#include "attach/prometheus_parse.h"

namespace kvscope::attach {

struct ScrapeStats {
  std::string url;
  uint64_t scrapes = 0;         // attempts
  uint64_t ok = 0;              // answers that parsed to at least one sample
  uint64_t failed = 0;          // no answer in time, refused, or a non-200 status
  uint64_t not_prometheus = 0;  // a 200 that is no exposition text (HTML, JSON, ...)
  uint64_t parse_errors = 0;    // bad lines inside otherwise good answers
  std::string last_error;
  // The last good answer: kv_cache_usage_perc, prefix_cache_queries_total, prefix_cache_hits_total,
  // cache_hit_rate, num_preemptions_total, num_requests_running, num_requests_waiting (each the
  // sum over its label sets), and cache_config_info's labels.
  std::map<std::string, double> values;
  std::map<std::string, std::string> cache_config;
  std::string engine;           // "vllm", "sglang" or "" (which names it found)
};

// What one answer says, by our names (also used by the fuzz target and the tests).
void summarize_metrics(const PromText& text, ScrapeStats& into);

class MetricsScraper {
 public:
  MetricsScraper(std::string url, int interval_ms = 1000, int timeout_ms = 1000);  // throws on a bad URL
  ~MetricsScraper();  // stops the thread
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
