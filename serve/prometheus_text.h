#pragma once
// GET /metrics: the Prometheus text exposition format (version 0.0.4) with the names vLLM V1
// publishes, so a Grafana dashboard built for vLLM reads kvscope unchanged; kvscope's own
// numbers (waste, fragmentation, evictions, hybrid pools) under the kvscope: prefix.
#include <cstdint>
#include <map>
#include <string>

#include "telemetry/snapshot.h"
#include "serve/serve_metrics.h"

namespace kvscope::serve {

struct MetricsContext {
  std::string model_name;
  std::map<int, uint64_t> http_refused;  // status -> requests answered with it (4xx/5xx)
};

std::string render_prometheus(const Snapshot& snap, const ServeMetrics& m, const MetricsContext& ctx);

}  // namespace kvscope::serve
