#include "attach/metrics_summary.h"

#include <vector>

namespace kvscope::attach {

namespace {

// Our name -> the engines' names for it (vLLM V1, vLLM V0's gpu_ spelling, SGLang).
const std::map<std::string, std::vector<std::string>>& metric_names() {
  static const std::map<std::string, std::vector<std::string>> m = {
      {"kv_cache_usage_perc", {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}},
      {"prefix_cache_queries_total", {"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"}},
      {"prefix_cache_hits_total", {"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"}},
      {"cache_hit_rate", {"sglang:cache_hit_rate"}},
      {"num_preemptions_total", {"vllm:num_preemptions_total", "sglang:num_retracted_reqs"}},
      {"num_requests_running", {"vllm:num_requests_running", "sglang:num_running_reqs"}},
      {"num_requests_waiting", {"vllm:num_requests_waiting", "sglang:num_queue_reqs"}},
  };
  return m;
}

}  // namespace

void summarize_metrics(const PromText& text, ScrapeStats& into) {
  std::map<std::string, std::string> alias;
  for (const auto& [ours, theirs] : metric_names())
    for (const std::string& n : theirs) alias[n] = ours;
  into.values.clear();
  for (const PromSample& s : text.samples) {
    if (s.name.rfind("vllm:", 0) == 0)
      into.engine = "vllm";
    else if (s.name.rfind("sglang:", 0) == 0 && into.engine.empty())
      into.engine = "sglang";
    if (s.name == "vllm:cache_config_info") {
      into.cache_config.clear();
      for (const auto& [k, v] : s.labels) into.cache_config[k] = v;
    }
    auto it = alias.find(s.name);
    if (it != alias.end()) into.values[it->second] += s.value;
  }
}

}  // namespace kvscope::attach
