#include "run/timed_replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "engine/scheduler.h"
#include "run/replay_tier.h"

namespace kvscope {

namespace {

struct Live {
  std::unique_ptr<Sequence> seq;
  double arrival = 0, admitted = -1, first_token = -1;
};

struct Instance {
  std::unique_ptr<TieredKvCacheManager> kv;
  std::unique_ptr<Scheduler> sched;
  std::unordered_map<SeqId, Live> live;
  double clock = 0;         // the end of its last step, or the last arrival while idle
  int64_t load_tokens = 0;  // tokens its live requests still have to compute
  TimedInstanceStats st;
};

struct Latencies {
  std::vector<double> ttft, queue, e2e, tpot;
};

// A step's work as the cost model sees it: chunk [p, p + n) of a sequence computes n tokens,
// attends to p + 1 .. p + n positions, and reads the sequence's KV up to p + n once.
StepWork work_of(const SchedulerOutput& out) {
  StepWork w;
  for (const ScheduledChunk& c : out.chunks) {
    const double p = c.first_pos, n = c.n_tokens;
    w.tokens += c.n_tokens;
    w.attention_pairs += n * p + n * (n + 1) / 2;
    w.kv_read_tokens += p + n;
    ++w.sequences;
  }
  return w;
}

void record_latencies(const Live& l, double now, Latencies& lat) {
  const Sequence& q = *l.seq;
  lat.e2e.push_back(now - l.arrival);
  if (l.first_token >= 0) lat.ttft.push_back(l.first_token - l.arrival);
  if (l.admitted >= 0) lat.queue.push_back(l.admitted - l.arrival);
  if (q.num_generated() > 1) lat.tpot.push_back((now - l.first_token) / (q.num_generated() - 1));
}

class Simulation {
 public:
  Simulation(std::span<const TraceRequest> reqs, const FleetOptions& fleet, const ReplayOptions& opt,
             const TimedOptions& timed)
      : reqs_(reqs), fleet_(fleet), opt_(opt), timed_(timed) {
    timed.cost.check();
    if (fleet.instances < 1 || fleet.instances > 4096) throw std::invalid_argument("instances must be in 1..4096");
    if (timed.max_running < 1 || timed.max_batched_tokens < 1)
      throw std::invalid_argument("max running and max batched tokens must be >= 1");
    check_replay_block_size(reqs, opt.block_size);
    KvCacheConfig cfg;
    cfg.block_size = opt.block_size;
    cfg.num_blocks = instance_pool_blocks(reqs, fleet.gpu_tokens, opt.block_size);
    SchedulerConfig sc;
    sc.max_running = timed.max_running;
    sc.max_batched_tokens = timed.max_batched_tokens;
    int64_t longest = 1;
    for (const TraceRequest& r : reqs)
      longest = std::max<int64_t>(longest, int64_t{r.input_length} + r.output_length + 1);
    sc.max_model_len = static_cast<int32_t>(std::min<int64_t>(longest, std::numeric_limits<int32_t>::max()));
    for (int32_t i = 0; i < fleet.instances; ++i) {
      Instance in;
      in.kv = std::make_unique<TieredKvCacheManager>(cfg, fleet.cpu_tokens / opt.block_size);
      in.sched = std::make_unique<Scheduler>(sc, *in.kv);
      in.st.cache.pool_blocks = cfg.num_blocks;
      inst_.push_back(std::move(in));
    }
    cand_.resize(inst_.size());
    if (!reqs.empty()) {
      t0_ = static_cast<double>(reqs.front().timestamp_ms) / 1000.0;
      duration_ = static_cast<double>(reqs.back().timestamp_ms) / 1000.0 - t0_;
    }
  }

  TimedResult run() {
    size_t next = 0;
    double now = 0;
    while (true) {
      const double ta = next < reqs_.size() ? static_cast<double>(reqs_[next].timestamp_ms) / 1000.0 - t0_ : kInf;
      Instance* busy = nullptr;
      for (Instance& in : inst_)
        if (in.sched->has_work() && (!busy || in.clock < busy->clock)) busy = &in;
      const double tb = busy ? busy->clock : kInf;
      if (ta == kInf && tb == kInf) break;
      now = std::min(ta, tb);
      sample_pool(now);
      if (ta <= tb)
        arrive(next++, ta);
      else
        step(*busy);
    }
    return result(now);
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  void arrive(size_t n, double t) {
    const TraceRequest& r = reqs_[n];
    auto q = std::make_unique<Sequence>();
    q->id = next_id_++;
    synthesize_prompt(r, prompt_, opt_.vocab_size);
    q->set_prompt(prompt_);
    q->max_new_tokens = std::max(1, r.output_length);
    q->ignore_eos = true;
    if (fleet_.router == RouterKind::PrefixAware)
      for (size_t i = 0; i < inst_.size(); ++i) cand_[i].cached_tokens = inst_[i].kv->peek_cached_prefix(prompt_);
    for (size_t i = 0; i < inst_.size(); ++i) cand_[i].load_tokens = inst_[i].load_tokens;
    Instance& in = inst_[route(fleet_.router, cand_, n, r.input_length)];
    if (!in.sched->has_work()) in.clock = std::max(in.clock, t);
    in.load_tokens += r.input_length + q->max_new_tokens;
    in.st.cache.requests += 1;
    in.st.cache.prompt_tokens += static_cast<uint64_t>(r.input_length);
    in.kv->load_from_cpu(q->id, prompt_);
    Sequence* raw = q.get();
    in.live.emplace(raw->id, Live{std::move(q), t});
    in.sched->add(raw);
  }

  void step(Instance& in) {
    SchedulerOutput out = in.sched->schedule();
    const StepWork w = work_of(out);
    const double transfer = timed_.cost.transfer_seconds(in.kv->take_loaded_tokens());
    double dt = timed_.cost.step_seconds(w) + transfer;
    if (w.tokens == 0) {
      // Nothing computed (every waiting request rejected, say): time still moves on.
      dt = std::max(dt, timed_.cost.step_overhead_s + 1e-6);
      if (++idle_steps_ > 1000000) throw std::logic_error("timed replay: the scheduler makes no progress");
    }
    for (const AdmissionInfo& a : out.admitted) {
      Live& l = in.live.at(a.seq);
      if (l.admitted < 0) l.admitted = in.clock;
      in.load_tokens -= a.cached;
    }
    for (const PreemptionInfo& p : out.preemption_info) in.load_tokens += p.tokens_lost;
    in.st.preemptions += out.preempted.size();
    in.load_tokens -= w.tokens;
    in.sched->on_step_done(out);
    const double end = in.clock + dt;
    for (const ScheduledChunk& c : out.chunks) {
      Sequence& q = *c.seq;
      if (!c.wants_logits || q.is_finished()) continue;
      Live& l = in.live.at(q.id);
      // An id from the sequence's own stream: no prompt and no other output shares it.
      q.tokens.push_back(synthetic_token(-1 - q.id, q.total_len(), opt_.vocab_size));
      if (l.first_token < 0) l.first_token = end;
      if (q.num_generated() >= q.max_new_tokens || q.total_len() >= in.sched->config().max_model_len)
        in.sched->finish(&q, SeqState::Finished, FinishReason::Length);
    }
    in.sched->end_step(out);
    in.clock = end;
    in.st.busy_s += dt;
    in.st.transfer_s += transfer;
    ++in.st.steps;
    // Only sequences this step touched can have ended.
    touched_.clear();
    for (const ScheduledChunk& c : out.chunks) touched_.push_back(c.seq->id);
    touched_.insert(touched_.end(), out.rejected.begin(), out.rejected.end());
    touched_.insert(touched_.end(), out.length_capped.begin(), out.length_capped.end());
    for (SeqId id : touched_) {
      auto it = in.live.find(id);
      if (it == in.live.end() || !it->second.seq->is_finished()) continue;
      const Sequence& q = *it->second.seq;
      if (q.state == SeqState::Rejected) {
        ++in.st.rejected;
        in.load_tokens -= q.prompt_len - q.num_computed + q.max_new_tokens;
      } else {
        record_latencies(it->second, end, lat_);
        ++finished_;
      }
      last_token_ = std::max(last_token_, end);
      in.live.erase(it);
    }
  }

  void sample_pool(double now) {
    const double every = duration_ > 0 ? duration_ / std::max(1, timed_.pool_samples) : 1.0;
    while (now >= next_sample_) {
      PoolSample s;
      s.t = next_sample_;
      for (const Instance& in : inst_) {
        s.used.push_back(static_cast<double>(in.kv->pool().num_used()) / in.kv->pool().num_blocks());
        s.running.push_back(static_cast<int32_t>(in.sched->running().size()));
        s.waiting.push_back(static_cast<int32_t>(in.sched->waiting().size()));
      }
      pool_.push_back(std::move(s));
      next_sample_ += every;
    }
  }

  TimedResult result(double now) {
    TimedResult res;
    for (Instance& in : inst_) {
      in.st.cache.gpu_hit_tokens = in.kv->gpu_hit_tokens();
      in.st.cache.cpu_hit_tokens = in.kv->cpu_hit_tokens();
      in.st.cache.evictions = in.kv->pool().counters().evictions;
      in.st.cache.cpu_evictions = in.kv->cpu_tier() ? in.kv->cpu_tier()->evictions() : 0;
      res.total.cache.add(in.st.cache);
      res.total.preemptions += in.st.preemptions;
      res.total.rejected += in.st.rejected;
      res.total.steps += in.st.steps;
      res.total.busy_s += in.st.busy_s;
      res.total.transfer_s += in.st.transfer_s;
      res.instances.push_back(in.st);
    }
    res.ttft_s = percentiles(lat_.ttft);
    res.queue_s = percentiles(lat_.queue);
    res.e2e_s = percentiles(lat_.e2e);
    res.tpot_s = percentiles(lat_.tpot);
    res.finished = finished_;
    res.makespan_s = std::max(last_token_, now);
    res.pool = std::move(pool_);
    return res;
  }

  std::span<const TraceRequest> reqs_;
  FleetOptions fleet_;
  ReplayOptions opt_;
  TimedOptions timed_;
  std::vector<Instance> inst_;
  std::vector<RouterCandidate> cand_;
  std::vector<TokenId> prompt_;
  std::vector<SeqId> touched_;
  Latencies lat_;
  std::vector<PoolSample> pool_;
  double t0_ = 0, duration_ = 0, next_sample_ = 0, last_token_ = 0;
  SeqId next_id_ = 0;
  int64_t finished_ = 0;
  int64_t idle_steps_ = 0;
};

}  // namespace

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  p.max = v.back();
  return p;
}

TimedResult timed_replay(std::span<const TraceRequest> reqs, const FleetOptions& fleet, const ReplayOptions& opt,
                         const TimedOptions& timed) {
  Simulation sim(reqs, fleet, opt, timed);
  return sim.run();
}

}  // namespace kvscope
