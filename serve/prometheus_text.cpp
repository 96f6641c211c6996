#include "serve/prometheus_text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace kvscope::serve {
namespace {

// Label values escape backslash, double quote and newline (the format's only escapes).
std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest text that reads back as the same double ("0.005", not 0.0050000000000000001),
  // as Prometheus' own clients write bucket bounds.
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

class Writer {
 public:
  explicit Writer(std::string model) : labels_("model_name=\"" + escape(model) + "\"") {}
  void family(const std::string& name, const char* type, const std::string& help) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  void sample(const std::string& name, double v, const std::string& extra = "") {
    out_ << name << "{" << labels_ << (extra.empty() ? "" : ",") << extra << "} " << num(v) << "\n";
  }
  void gauge(const std::string& name, const std::string& help, double v) {
    family(name, "gauge", help);
    sample(name, v);
  }
  void counter(const std::string& name, const std::string& help, double v) {  // name ends in _total
    family(name, "counter", help);
    sample(name, v);
  }
  void histogram(const std::string& name, const std::string& help, const Histogram& h) {
    family(name, "histogram", help);
    for (size_t i = 0; i < h.bounds().size(); ++i)
      sample(name + "_bucket", static_cast<double>(h.cumulative_counts()[i]), "le=\"" + num(h.bounds()[i]) + "\"");
    sample(name + "_bucket", static_cast<double>(h.count()), "le=\"+Inf\"");
    sample(name + "_sum", h.sum());
    sample(name + "_count", static_cast<double>(h.count()));
  }
  std::string str() const { return out_.str(); }

 private:
  std::string labels_;
  std::ostringstream out_;
};

// Every KV group's blocks by state.
void write_kv_block_metrics(Writer& w, const Snapshot& s) {
  w.family("kvscope:kv_blocks", "gauge",
           "KV blocks by state (cached: unreferenced but hashed, evictable) and KV group.");
  auto blocks = [&](int g, int32_t u, int32_t ca, int32_t f) {
    const std::string grp = "group=\"" + std::to_string(g) + "\",state=";
    w.sample("kvscope:kv_blocks", u, grp + "\"used\"");
    w.sample("kvscope:kv_blocks", ca, grp + "\"cached\"");
    w.sample("kvscope:kv_blocks", f, grp + "\"free\"");
  };
  blocks(0, s.memory.blocks_used, s.memory.blocks_cached, s.memory.blocks_free);
  for (size_t g = 1; g < s.kv_groups.size(); ++g)
    blocks(static_cast<int>(g), s.kv_groups[g].blocks_used, s.kv_groups[g].blocks_cached, s.kv_groups[g].blocks_free);
}

// A hybrid recurrent model's state pool: fixed per sequence, so apart from the per-token KV.
void write_state_metrics(Writer& w, const StateSnap& t) {
  w.family("kvscope:state_slots", "gauge", "Recurrent-state slots (one per running sequence) by state.");
  w.sample("kvscope:state_slots", t.slots_used, "state=\"used\"");
  w.sample("kvscope:state_slots", t.slots_total - t.slots_used, "state=\"free\"");
  w.family("kvscope:state_slot_bytes", "gauge", "Bytes of one sequence's recurrent state (every recurrent layer).");
  w.sample("kvscope:state_slot_bytes", static_cast<double>(t.bytes_per_slot), "dtype=\"" + escape(t.dtype) + "\"");
  w.gauge("kvscope:state_used_bytes", "Recurrent-state memory held by running sequences.",
          static_cast<double>(t.slots_used) * static_cast<double>(t.bytes_per_slot));
  w.family("kvscope:state_checkpoints", "gauge", "Prefix-cache state checkpoints by state, and the policy.");
  const std::string policy = "policy=\"" + escape(t.checkpoint_policy) + "\",state=";
  w.sample("kvscope:state_checkpoints", t.checkpoints_used, policy + "\"held\"");
  w.sample("kvscope:state_checkpoints", t.checkpoints_total - t.checkpoints_used, policy + "\"free\"");
  w.gauge("kvscope:state_checkpoint_bytes", "Memory held by state checkpoints.",
          static_cast<double>(t.checkpoints_used) * static_cast<double>(t.bytes_per_slot));
  w.counter("kvscope:state_checkpoints_saved_total", "State checkpoints written.",
            static_cast<double>(t.checkpoints_saved));
  w.counter("kvscope:state_checkpoints_restored_total", "Prefix hits served from a state checkpoint.",
            static_cast<double>(t.checkpoints_restored));
  w.counter("kvscope:state_checkpoints_evicted_total", "State checkpoints evicted to make room (LRU).",
            static_cast<double>(t.checkpoints_evicted));
}

}  // namespace

std::string render_prometheus(const Snapshot& s, const ServeMetrics& m, const MetricsContext& ctx) {
  Writer w(ctx.model_name);
  const MemorySnap& mem = s.memory;
  const EngineCounters& c = s.counters;
  // vLLM: usage = 1 - free / total, where evictable cached blocks count as free.
  int64_t total = mem.blocks_total, used = mem.blocks_used;
  for (size_t g = 1; g < s.kv_groups.size(); ++g) {
    total += s.kv_groups[g].blocks_total;
    used += s.kv_groups[g].blocks_used;
  }
  w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", s.running);
  w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting);
  w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
          total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0.0);
  w.counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<double>(c.prefix_queries_tokens));
  w.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<double>(c.prefix_hits_tokens));
  w.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
            static_cast<double>(c.preemptions));
  w.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", static_cast<double>(m.prompt_tokens));
  w.counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
            static_cast<double>(m.generation_tokens));
  w.family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const char* reason : {"stop", "length"}) {
    auto it = m.finished_by_reason.find(reason);
    w.sample("vllm:request_success_total", it == m.finished_by_reason.end() ? 0.0 : static_cast<double>(it->second),
             std::string("finished_reason=\"") + reason + "\"");
  }
  w.sample("vllm:request_success_total", static_cast<double>(m.requests_cancelled), "finished_reason=\"abort\"");
  w.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  w.sample("vllm:cache_config_info", 1.0,
           "block_size=\"" + std::to_string(s.block_size) + "\",cache_dtype=\"" + escape(s.kv_dtype) +
               "\",enable_prefix_caching=\"" + (s.prefix_caching ? "True" : "False") + "\",num_gpu_blocks=\"" +
               std::to_string(total) + "\",num_cpu_blocks=\"0\"");
  w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft);
  w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl);
  w.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m.e2e);
  w.histogram("vllm:request_prefill_kv_computed_tokens",
              "Histogram of new KV tokens computed during prefill (excluding cached tokens).", m.prefill_computed);

  // kvscope's own.
  write_kv_block_metrics(w, s);
  w.gauge("kvscope:kv_waste_perc", "Reserved KV slots holding no token, 0..1 (group 0).", mem.waste_pct / 100.0);
  w.gauge("kvscope:kv_tokens_stored", "Tokens held in used KV blocks (group 0).",
          static_cast<double>(mem.slots_filled));
  w.gauge("kvscope:kv_used_bytes", "KV memory in use, every group.", static_cast<double>(mem.kv_used_bytes));
  w.gauge("kvscope:kv_pool_bytes", "KV memory pool, every group.", static_cast<double>(mem.kv_pool_bytes));
  if (s.state.on) write_state_metrics(w, s.state);
  w.gauge("kvscope:external_fragmentation", "1 - largest free run / free slots (0 for the paged allocator).",
          s.allocator.external_fragmentation);
  w.counter("kvscope:evictions_total", "Cached blocks evicted to make room.", static_cast<double>(c.evictions));
  w.counter("kvscope:block_allocations_total", "KV blocks taken.", static_cast<double>(c.allocations));
  w.counter("kvscope:block_frees_total", "KV blocks given back.", static_cast<double>(c.frees));
  w.counter("kvscope:engine_steps_total", "Engine steps.", static_cast<double>(c.steps));
  w.counter("kvscope:requests_cancelled_total", "Sequences cancelled (client gone or stop string).",
            static_cast<double>(m.requests_cancelled));
  w.counter("kvscope:requests_rejected_total", "Sequences the engine refused after admission.",
            static_cast<double>(m.requests_rejected));
  w.gauge("kvscope:requests_in_flight", "Sequences submitted to the engine thread and not finished.",
          m.active_requests);
  w.counter("kvscope:kv_validations_total", "KV-cache invariant checks run when the engine went idle.",
            static_cast<double>(m.kv_validations));
  w.counter("kvscope:kv_validation_failures_total", "KV-cache invariant checks that failed.",
            static_cast<double>(m.kv_validation_failures));
  w.gauge("kvscope:tokens_per_second", "Generated tokens per second over the last second.", s.tokens_per_s);
  w.family("kvscope:http_errors_total", "counter", "HTTP requests answered with an error status.");
  for (const auto& [status, n] : ctx.http_refused)
    w.sample("kvscope:http_errors_total", static_cast<double>(n), "status=\"" + std::to_string(status) + "\"");
  return w.str();
}

}  // namespace kvscope::serve
