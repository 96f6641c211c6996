#pragma once
// The numbers behind GET /metrics that the engine's snapshot does not keep: per-request
// histograms and totals, recorded by the engine thread, read by HTTP threads (under a mutex
// that guards only these numbers). Rendering is in prometheus_text.h.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kvscope::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size(), 0) {}
  void observe(double v) {
    for (size_t i = 0; i < bounds_.size(); ++i)
      if (v <= bounds_[i]) ++counts_[i];  // cumulative, as Prometheus buckets are
    sum_ += v;
    ++count_;
  }
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& cumulative_counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max.
std::vector<double> buckets_1_2_5(double max);

struct ServeMetrics {
  // Bucket bounds as vLLM V1 uses them (vllm/v1/metrics/loggers.py).
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                  1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}};
  Histogram e2e{{0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}};
  Histogram itl{
      {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram prefill_computed{{1}};  // replaced once the context length is known
  uint64_t prompt_tokens = 0;       // of requests whose prompt was computed (cached part included)
  uint64_t generation_tokens = 0;
  std::map<std::string, uint64_t> finished_by_reason;  // vllm:request_success_total{finished_reason}
  uint64_t requests_cancelled = 0;                     // clients that went away (or asked to stop)
  uint64_t requests_rejected = 0;                      // refused by the engine after admission
  uint64_t kv_validations = 0, kv_validation_failures = 0;
  std::string last_validation_error;
  int32_t active_requests = 0;  // submitted to the worker and not finished
};

}  // namespace kvscope::serve
