#pragma once
// One /metrics answer by our names, whichever engine sent it (vLLM's vllm:*, vLLM V0's gpu_
// spellings, SGLang's sglang:*), and the scrape counters shown beside it.
#include <cstdint>
#include <map>
#include <string>

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
  std::string engine;  // "vllm", "sglang" or "" (which names it found)
};

// What one answer says, by our names (also used by the fuzz target and the tests).
void summarize_metrics(const PromText& text, ScrapeStats& into);

}  // namespace kvscope::attach
