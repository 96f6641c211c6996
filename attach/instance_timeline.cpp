#include "attach/instance_timeline.h"

#include <algorithm>

namespace kvscope::attach {
namespace {

// A counter's increase since the previous answer; a counter that went down was reset (the
// engine restarted), so all of its value is new, as Prometheus' rate() reads it. The first
// answer is only the baseline: what it counts happened before the attach.
double increase(std::optional<double>& prev, double now) {
  const double d = !prev ? 0 : (now >= *prev ? now - *prev : now);
  prev = now;
  return d;
}

std::optional<double> value_of(const ScrapeStats& m, const char* name) {
  const auto it = m.values.find(name);
  if (it == m.values.end()) return std::nullopt;
  return it->second;
}

uint64_t since(uint64_t now, uint64_t before) { return now >= before ? now - before : now; }

}  // namespace

void merge_samples(TimelineSample& a, const TimelineSample& b) {
  a.dt += b.dt;
  a.cached_blocks = std::max(a.cached_blocks, b.cached_blocks);
  a.live_events += b.live_events;
  a.lag_samples += b.lag_samples;
  a.lag_sum_s += b.lag_sum_s;
  a.usage = std::fmax(a.usage, b.usage);  // fmax ignores a NaN: no metrics in one half
  a.hits += b.hits;
  a.queries += b.queries;
  if (!std::isnan(b.hit_rate_gauge)) a.hit_rate_gauge = b.hit_rate_gauge;
  a.preemptions += b.preemptions;
}

InstanceTimeline::InstanceTimeline(size_t max_samples, double bucket_s)
    : max_samples_(std::max<size_t>(2, max_samples)), bucket_(bucket_s > 0 ? bucket_s : 0.25) {}

void InstanceTimeline::take_metrics(const ScrapeStats& m, TimelineSample& s) {
  if (m.ok == 0) return;   // nothing scraped yet, or never a good answer
  if (m.ok == prev_ok_) {  // the same answer as last tick: the level holds, nothing increased
    s.usage = usage_last_;
    return;
  }
  prev_ok_ = m.ok;
  if (auto u = value_of(m, "kv_cache_usage_perc")) s.usage = usage_last_ = *u;
  if (auto h = value_of(m, "prefix_cache_hits_total")) s.hits = increase(prev_hits_, *h);
  if (auto q = value_of(m, "prefix_cache_queries_total")) s.queries = increase(prev_queries_, *q);
  if (auto g = value_of(m, "cache_hit_rate")) s.hit_rate_gauge = *g;
  if (auto p = value_of(m, "num_preemptions_total")) s.preemptions = static_cast<uint64_t>(increase(prev_preempt_, *p));
}

void InstanceTimeline::add(const TimelineTick& k) {
  if (!started_) start_ = last_now_ = k.now, started_ = true;
  TimelineSample s;
  s.t = k.now - start_;
  s.dt = std::max(0.0, k.now - last_now_);
  s.cached_blocks = k.cached_blocks;
  s.live_events = since(k.live_events, prev_events_);
  s.lag_samples = since(k.lag_samples, prev_lag_n_);
  s.lag_sum_s = s.lag_samples ? k.lag_sum_s - prev_lag_sum_ : 0;
  if (k.metrics) take_metrics(*k.metrics, s);
  prev_events_ = k.live_events, prev_lag_n_ = k.lag_samples, prev_lag_sum_ = k.lag_sum_s;
  last_now_ = std::max(last_now_, k.now);
  last_blocks_ = k.cached_blocks;
  if (samples_.empty())
    total_ = s;
  else
    merge_samples(total_, s);
  push(s);
}

void InstanceTimeline::tick(double now, const InstanceStream& s, const ScrapeStats* metrics) {
  const StreamCounters& c = s.counters();
  add({now, s.view().held_blocks(), c.live_events, c.lag_samples, c.lag_sum_s, metrics});
}

void InstanceTimeline::push(const TimelineSample& s) {
  ++revision_;
  if (!samples_.empty() && std::floor(s.t / bucket_) == std::floor(samples_.back().t / bucket_)) {
    merge_samples(samples_.back(), s);
    return;
  }
  samples_.push_back(s);
  if (samples_.size() > max_samples_) coarsen();
}

void InstanceTimeline::coarsen() {
  while (samples_.size() > max_samples_) {
    bucket_ *= 2;
    std::vector<TimelineSample> out;
    out.reserve(samples_.size() / 2 + 1);
    for (const TimelineSample& s : samples_) {
      if (!out.empty() && std::floor(s.t / bucket_) == std::floor(out.back().t / bucket_))
        merge_samples(out.back(), s);
      else
        out.push_back(s);
    }
    samples_ = std::move(out);
  }
}

TimelineSummary InstanceTimeline::summary() const {
  TimelineSummary r;
  r.samples = samples_.size();
  r.bucket_s = bucket_;
  r.span_s = last_now_ - start_;
  r.cached_blocks_last = last_blocks_;
  r.cached_blocks_peak = total_.cached_blocks;
  r.live_events = total_.live_events;
  r.events_per_s_mean = r.span_s > 0 ? static_cast<double>(r.live_events) / r.span_s : 0;
  r.lag_s_mean = total_.lag_s();
  r.usage_last = usage_last_;
  r.usage_peak = total_.usage;
  r.hits = total_.hits, r.queries = total_.queries, r.hit_rate = total_.hit_rate();
  r.preemptions = total_.preemptions;
  for (const TimelineSample& s : samples_) {
    r.events_per_s_peak = std::max(r.events_per_s_peak, s.events_per_s());
    r.lag_s_peak = std::fmax(r.lag_s_peak, s.lag_s());
    if (s.preemptions) ++r.preemption_markers;
  }
  return r;
}

void tick_timelines(std::vector<InstanceTimeline>& timelines, const AttachedStreams& z,
                    const std::vector<ScrapeStats>& metrics, double now) {
  if (timelines.size() < z.size()) timelines.resize(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    const auto src = static_cast<size_t>(z.spec(i).source);
    const ScrapeStats* m = src < metrics.size() && !metrics[src].url.empty() ? &metrics[src] : nullptr;
    timelines[i].tick(now, z.stream(i), m);
  }
}

}  // namespace kvscope::attach
