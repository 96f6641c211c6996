#include "attach/attach_report.h"

#include <cmath>

#include "attach/prefix_forest.h"

namespace kvscope::attach {
namespace {

nlohmann::json opt_json(const std::optional<std::string>& s) {
  return s ? nlohmann::json(*s) : nlohmann::json(nullptr);
}

nlohmann::json block_json(const CachedBlock& b, const TokenText& text) {
  nlohmann::json j = {
      {"hash", hash_json(b.key.hash)},    {"parent", b.parent ? hash_json(*b.parent) : nlohmann::json(nullptr)},
      {"token_ids", b.token_ids},         {"group_idx", b.key.group_idx},
      {"medium", opt_json(b.key.medium)}, {"copies", b.copies},
      {"first_seen", b.first_seen},       {"last_seen", b.last_seen}};
  if (text) j["text"] = text(b.token_ids);
  return j;
}

nlohmann::json counters_json(const StreamCounters& c, const CacheCounters& v) {
  return {{"messages", c.messages},
          {"bad_frames", c.bad_frames},
          {"undecodable", c.undecodable},
          {"restarts", c.restarts},
          {"duplicates", c.duplicates},
          {"replay_requests", c.replay_requests},
          {"stored", v.stored},
          {"removed", v.removed},
          {"clears", v.clears},
          {"removed_unknown", v.removed_unknown},
          {"missing_parent", v.missing_parent},
          {"token_count_mismatch", v.token_count_mismatch}};
}

nlohmann::json metrics_json(const ScrapeStats& m) {
  return {{"url", m.url},
          {"scrapes", m.scrapes},
          {"ok", m.ok},
          {"failed", m.failed},
          {"not_prometheus", m.not_prometheus},
          {"parse_errors", m.parse_errors},
          {"last_error", m.last_error},
          {"engine", m.engine},
          {"values", m.values},
          {"cache_config", m.cache_config}};
}

// NaN (no value: no /metrics, no lookups, no live batch) as null rather than a number.
nlohmann::json num(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

nlohmann::json sharing_json(const FleetSharing& f) {
  const FleetOverlap& o = f.overlap;
  nlohmann::json by = nlohmann::json::array(), per = nlohmann::json::array();
  for (const HolderCount& h : f.by_holders)
    by.push_back({{"instances", h.holders}, {"nodes", h.nodes}, {"tokens", h.tokens}});
  for (size_t i = 0; i < f.per_instance.size(); ++i) {
    const InstanceSharing& s = f.per_instance[i];
    per.push_back({{"instance", i},
                   {"nodes", s.nodes},
                   {"tokens", s.tokens},
                   {"shared_nodes", s.shared_nodes},
                   {"shared_tokens", s.shared_tokens}});
  }
  return {{"nodes", o.nodes},
          {"copies", o.copies},
          {"shared_nodes", o.shared_nodes},
          {"duplicated_blocks", o.duplicated_blocks},
          {"duplicated_tokens", o.duplicated_tokens},
          {"ideal_router_saving", o.ideal_router_saving},
          {"token_copies", f.token_copies},
          {"ideal_router_token_saving", f.ideal_router_token_saving},
          {"by_holders", std::move(by)},
          {"per_instance", std::move(per)}};
}

}  // namespace

nlohmann::json timeline_json(const InstanceTimeline& t) {
  const TimelineSummary s = t.summary();
  nlohmann::json cols = {{"t", nlohmann::json::array()},
                         {"dt", nlohmann::json::array()},
                         {"cached_blocks", nlohmann::json::array()},
                         {"usage", nlohmann::json::array()},
                         {"hit_rate", nlohmann::json::array()},
                         {"events_per_s", nlohmann::json::array()},
                         {"lag_s", nlohmann::json::array()},
                         {"preemptions", nlohmann::json::array()}};
  for (const TimelineSample& x : t.samples()) {
    cols["t"].push_back(x.t), cols["dt"].push_back(x.dt), cols["cached_blocks"].push_back(x.cached_blocks);
    cols["usage"].push_back(num(x.usage)), cols["hit_rate"].push_back(num(x.hit_rate()));
    cols["events_per_s"].push_back(x.events_per_s()), cols["lag_s"].push_back(num(x.lag_s()));
    cols["preemptions"].push_back(x.preemptions);
  }
  return {{"samples", s.samples},
          {"bucket_s", s.bucket_s},
          {"span_s", s.span_s},
          {"cached_blocks_last", s.cached_blocks_last},
          {"cached_blocks_peak", s.cached_blocks_peak},
          {"live_events", s.live_events},
          {"events_per_s_mean", s.events_per_s_mean},
          {"events_per_s_peak", s.events_per_s_peak},
          {"lag_s_mean", num(s.lag_s_mean)},
          {"lag_s_peak", num(s.lag_s_peak)},
          {"usage_last", num(s.usage_last)},
          {"usage_peak", num(s.usage_peak)},
          {"prefix_hits", s.hits},
          {"prefix_queries", s.queries},
          {"hit_rate", num(s.hit_rate)},
          {"preemptions", s.preemptions},
          {"preemption_markers", s.preemption_markers},
          {"series", std::move(cols)}};
}

nlohmann::json hash_json(const BlockHash& h) {
  if (h.is_bytes()) return h.text();
  if (h.is_negative()) return static_cast<int64_t>(h.bits());
  return h.bits();
}

nlohmann::json instance_json(const InstanceSpec& spec, const InstanceStream& s, const TokenText& text) {
  const StreamCounters& c = s.counters();
  nlohmann::json blocks = nlohmann::json::array();
  for (const CachedBlock* b : s.view().sorted()) blocks.push_back(block_json(*b, text));
  const TreeShape t = tree_shape(s.view());
  return {
      {"endpoint", spec.endpoint},
      {"replay_endpoint", spec.replay},
      {"dp_rank", spec.dp_rank},
      {"reported_dp_rank", s.data_parallel_rank() ? nlohmann::json(*s.data_parallel_rank()) : nlohmann::json(nullptr)},
      {"topic", s.topic()},
      {"batches", c.batches},
      {"gaps", c.gaps},
      {"replayed", c.replayed},
      {"lost_batches", c.lost_batches},
      {"stale", s.stale()},
      {"last_seq", s.last_seq() ? nlohmann::json(*s.last_seq()) : nlohmann::json(nullptr)},
      {"ignored", {{"fields", c.ignored.ignored_fields}, {"events", c.ignored.ignored_events}}},
      {"counters", counters_json(c, s.view().counters())},
      {"last_error", s.last_error()},
      {"max_lag_s", s.max_lag_s()},
      {"blocks", std::move(blocks)},
      {"tree",
       {{"nodes", t.nodes},
        {"roots", t.roots},
        {"orphans", t.orphans},
        {"leaves", t.leaves},
        {"max_depth", t.max_depth}}}};
}

nlohmann::json merged_json(const MergedTree& m, size_t instances) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const MergedNode& n : m.nodes)
    nodes.push_back({{"hash", hash_json(n.hash)},
                     {"parent", n.parent ? hash_json(*n.parent) : nlohmann::json(nullptr)},
                     {"group_idx", n.group_idx},
                     {"tokens", n.tokens},
                     {"instances", n.instances}});
  return {{"nodes", std::move(nodes)}, {"overlap", sharing_json(fleet_sharing(m, instances))}};
}

nlohmann::json attach_report(const AttachedStreams& a, const std::vector<ScrapeStats>& metrics, const TokenText& text,
                             double seconds, const std::vector<InstanceTimeline>& timelines) {
  nlohmann::json inst = nlohmann::json::array();
  std::vector<const CacheView*> views;
  for (size_t i = 0; i < a.size(); ++i) {
    nlohmann::json j = instance_json(a.spec(i), a.stream(i), text);
    const auto src = static_cast<size_t>(a.spec(i).source);
    j["metrics"] = src < metrics.size() ? metrics_json(metrics[src]) : nlohmann::json(nullptr);
    if (i < timelines.size()) j["timeline"] = timeline_json(timelines[i]);
    inst.push_back(std::move(j));
    views.push_back(&a.stream(i).view());
  }
  return {
      {"seconds", seconds}, {"instances", std::move(inst)}, {"merged", merged_json(merge_trees(views), views.size())}};
}

}  // namespace kvscope::attach
