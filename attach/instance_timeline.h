#pragma once
// Memory over time for one attached instance, sampled a few times a second from its stream and
// its /metrics: cached blocks (from the events), kv_cache_usage_perc, the prefix-cache hit rate
// (from the increases of the hits and queries counters), preemptions (increases of
// num_preemptions_total), live events per second and lag (arrival minus the batch's timestamp).
// No Qt: the CLI reports it and the window draws it.
//
// Bounded: samples fall into buckets of bucket_s seconds; when there are more than max_samples
// the bucket width doubles and neighbours merge, so an attach of hours holds at most
// max_samples. Merging is by sums where a sum is what is meant (events, lag, hits and queries
// add up; a bucket's hit rate is its hits over its queries, not the best of its halves) and by
// maximum for levels (cached blocks and usage keep their peaks visible).
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "attach/metrics_summary.h"
#include "attach/attached_streams.h"

namespace kvscope::attach {

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

struct TimelineSample {
  double t = 0;                // its first tick, seconds since the attach started
  double dt = 0;               // seconds of ticks it covers
  uint64_t cached_blocks = 0;  // peak of the cached blocks (every copy) in the bucket
  uint64_t live_events = 0;    // KV events that arrived live in the bucket
  uint64_t lag_samples = 0;    // live batches, and the sum of their lags
  double lag_sum_s = 0;
  double usage = kNoValue;           // peak kv_cache_usage_perc (0..1); none without /metrics
  double hits = 0, queries = 0;      // increases of the prefix-cache counters
  double hit_rate_gauge = kNoValue;  // SGLang's cache_hit_rate, when there are no counters
  uint64_t preemptions = 0;          // increase of num_preemptions_total: a marker when > 0

  double events_per_s() const { return dt > 0 ? static_cast<double>(live_events) / dt : 0; }
  double lag_s() const { return lag_samples ? lag_sum_s / static_cast<double>(lag_samples) : kNoValue; }
  double hit_rate() const { return queries > 0 ? hits / queries : hit_rate_gauge; }  // NaN: no lookups
};

// What one tick sees: levels now, and the stream's counters so far (cumulative).
struct TimelineTick {
  double now = 0;  // Unix seconds
  uint64_t cached_blocks = 0;
  uint64_t live_events = 0, lag_samples = 0;
  double lag_sum_s = 0;
  const ScrapeStats* metrics = nullptr;  // none: no /metrics for this instance
};

// Exact over the whole attach (not thinned).
struct TimelineSummary {
  size_t samples = 0;
  double bucket_s = 0, span_s = 0;
  uint64_t cached_blocks_last = 0, cached_blocks_peak = 0;
  uint64_t live_events = 0;
  double events_per_s_mean = 0, events_per_s_peak = 0;  // the peak over the kept buckets
  double lag_s_mean = kNoValue, lag_s_peak = kNoValue;  // the peak of the kept buckets' means
  double usage_last = kNoValue, usage_peak = kNoValue;
  double hits = 0, queries = 0, hit_rate = kNoValue;  // during the attach
  uint64_t preemptions = 0;
  size_t preemption_markers = 0;  // kept buckets with a preemption
};

class InstanceTimeline {
 public:
  explicit InstanceTimeline(size_t max_samples = 480, double bucket_s = 0.25);
  void add(const TimelineTick& tick);
  // The convenience the CLI and the window call: one tick from the stream and its metrics.
  void tick(double now, const InstanceStream& s, const ScrapeStats* metrics);
  const std::vector<TimelineSample>& samples() const { return samples_; }
  double bucket_s() const { return bucket_; }
  double start() const { return start_; }  // Unix seconds of the first tick (0 before it)
  TimelineSummary summary() const;
  uint64_t revision() const { return revision_; }  // changes whenever samples() does

 private:
  void take_metrics(const ScrapeStats& m, TimelineSample& s);
  void push(const TimelineSample& s);
  void coarsen();

  std::vector<TimelineSample> samples_;
  size_t max_samples_;
  double bucket_, start_ = 0, last_now_ = 0;
  bool started_ = false;
  uint64_t prev_events_ = 0, prev_lag_n_ = 0, last_blocks_ = 0, revision_ = 0;
  double prev_lag_sum_ = 0;
  uint64_t prev_ok_ = 0;  // the scrape answers already taken
  std::optional<double> prev_hits_, prev_queries_, prev_preempt_;
  double usage_last_ = kNoValue;
  TimelineSample total_;  // every tick merged: the exact summary
};

// Merges b (later) into a: sums, peaks, the latest gauge.
void merge_samples(TimelineSample& a, const TimelineSample& b);

// One tick for each instance of an attach: timelines[i] follows z.stream(i) and the metrics
// of its --endpoint (metrics[spec.source], when there is one). Grows timelines to z.size().
void tick_timelines(std::vector<InstanceTimeline>& timelines, const AttachedStreams& z,
                    const std::vector<ScrapeStats>& metrics, double now);

}  // namespace kvscope::attach
