// Replay beyond one instance (run/replay_fleet.h, run/replay_tier.h, run/replay_router.h,
// run/timed_replay.h, run/replay_cost.h): hand-built traces whose answers follow from the
// prefix-cache rules (full blocks only, never the block of the last prompt token, LRU eviction
// tail first), the routers' cost rule, and the roofline worked out here by hand.
#include <QtTest>

#include <cmath>
#include <vector>

#include "run/replay_cost.h"
#include "run/replay_fleet.h"
#include "run/replay_tier.h"
#include "run/timed_replay.h"
#include "run/trace_replay.h"

using namespace kvscope;

namespace {

TraceRequest req(int32_t input, std::vector<int64_t> ids, int64_t t_ms = 0, int32_t output = 1) {
  TraceRequest r;
  r.input_length = input;
  r.output_length = output;
  r.hash_ids = std::move(ids);
  r.timestamp_ms = t_ms;
  return r;
}

ReplayOptions opts(int32_t bs) {
  ReplayOptions o;
  o.block_size = bs;
  o.validate = true;
  return o;
}

// A machine with round numbers: 1e12 FLOP/s, 1e11 B/s, host link 1e9 B/s, reached in full.
CostModel simple_cost() {
  CostModel c;
  c.hw = {"test", 1e12, 1e11, 1e9, ""};
  c.weight_bytes = 1e9;
  c.n_params = 1e9;
  c.active_params = 1e9;
  c.kv_bytes_per_token = 1e5;
  c.attn_flops_per_pair = 1e6;
  c.mfu = 1;
  c.mbu = 1;
  c.step_overhead_s = 0.001;
  return c;
}

}  // namespace

class TestReplayFleet : public QObject {
  Q_OBJECT
 private slots:
  void cpu_tier_is_lru() {
    CpuTier t(2);
    t.put(1);
    t.put(2);
    QVERIFY(t.touch(1));  // 1 newest, 2 oldest
    t.put(3);             // drops 2
    QVERIFY(t.touch(1));
    QVERIFY(!t.touch(2));
    QVERIFY(t.touch(3));
    QCOMPARE(t.evictions(), uint64_t{1});
    QCOMPARE(t.size(), int64_t{2});
  }

  void one_instance_equals_the_curve() {
    std::vector<TraceRequest> t;
    for (int i = 0; i < 40; ++i) t.push_back(req(4 * 512, {i % 5, 100 + i % 7, 200 + i % 3, 300 + i}));
    for (int64_t cap : {int64_t{0}, int64_t{6 * 512}, int64_t{12 * 512}}) {
      const ReplayPoint p = replay_trace(t, cap, opts(512));
      FleetOptions f;
      f.gpu_tokens = cap;
      const FleetResult r = replay_fleet(t, f, opts(512));
      QCOMPARE(r.total.gpu_hit_tokens, p.hit_tokens);
      QCOMPARE(r.total.prompt_tokens, p.prompt_tokens);
      QCOMPARE(r.total.evictions, p.evictions);
      QCOMPARE(r.total.cpu_hit_tokens, uint64_t{0});
    }
  }

  void evicted_blocks_hit_in_the_cpu_tier() {
    // A pool of 5 blocks: A (4 blocks) is cached, B (4 others) needs 4 of them: the free one and
    // three of A's, evicted tail first (A's blocks 3, 2, 1). A again: block 0 hits on the GPU,
    // blocks 1 and 2 in the CPU tier; block 3 holds the last prompt token and never hits.
    const std::vector<TraceRequest> t = {req(2048, {1, 2, 3, 4}), req(2048, {5, 6, 7, 8}), req(2048, {1, 2, 3, 4})};
    FleetOptions f;
    f.gpu_tokens = 5 * 512;
    f.cpu_tokens = 8 * 512;
    const FleetResult r = replay_fleet(t, f, opts(512));
    QCOMPARE(r.total.gpu_hit_tokens, uint64_t{512});
    QCOMPARE(r.total.cpu_hit_tokens, uint64_t{1024});
    f.cpu_tokens = 0;  // without the tier those two blocks are recomputed
    const FleetResult g = replay_fleet(t, f, opts(512));
    QCOMPARE(g.total.gpu_hit_tokens, uint64_t{512});
    QCOMPARE(g.total.cpu_hit_tokens, uint64_t{0});
  }

  void routers_follow_their_rules() {
    // Four copies of one 4-block prompt on 2 instances.
    const std::vector<TraceRequest> t(4, req(2048, {1, 2, 3, 4}));
    FleetOptions f;
    f.instances = 2;
    f.router = RouterKind::RoundRobin;
    FleetResult r = replay_fleet(t, f, opts(512));
    QCOMPARE(r.instances[0].requests, int64_t{2});
    QCOMPARE(r.total.gpu_hit_tokens, uint64_t{2 * 1536});  // each instance computes it once
    // Prefix-aware: cost = tokens to compute + work done so far. 1st: tie -> 0. 2nd: 0 costs
    // 2048 + 512, 1 costs 0 + 2048 -> 1. 3rd: both 2048 + 512 -> 0 (tie). 4th: 0 costs
    // 2560 + 512, 1 costs 2048 + 512 -> 1.
    f.router = RouterKind::PrefixAware;
    r = replay_fleet(t, f, opts(512));
    QCOMPARE(r.instances[0].requests, int64_t{2});
    QCOMPARE(r.instances[1].requests, int64_t{2});
    QCOMPARE(r.total.gpu_hit_tokens, uint64_t{2 * 1536});
    // X, Y, Y, X on 2 instances: round-robin puts each copy where the other prompt is cached
    // (no hits). Prefix-aware: X -> 0; Y: 0 costs 2048 + 2048, 1 costs 0 + 2048 -> 1; Y: 0 costs
    // 2048 + 2048, 1 costs 2048 + 512 -> 1; X: 0 costs 2048 + 512, 1 costs 2560 + 2048 -> 0.
    const TraceRequest X = req(2048, {1, 2, 3, 4}), Y = req(2048, {5, 6, 7, 8});
    const std::vector<TraceRequest> xyyx = {X, Y, Y, X};
    f.router = RouterKind::RoundRobin;
    QCOMPARE(replay_fleet(xyyx, f, opts(512)).total.gpu_hit_tokens, uint64_t{0});
    f.router = RouterKind::PrefixAware;
    QCOMPARE(replay_fleet(xyyx, f, opts(512)).total.gpu_hit_tokens, uint64_t{2 * 1536});
    QCOMPARE(route(RouterKind::LeastLoaded, std::vector<RouterCandidate>{{5, 0}, {3, 0}, {3, 0}}, 0, 10), size_t{1});
    QVERIFY(!parse_router("random"));
  }

  void roofline_by_hand() {
    const CostModel c = simple_cost();
    // A 1000-token prefill from position 0: FLOPs 2e9 x 1000 + 1e6 x (1000 x 1001 / 2) = 2.5005e12
    // -> 2.5005 s; bytes 1e9 + 1e5 x 1000 = 1.1e9 -> 0.011 s. Compute-bound.
    StepWork w{1000, 1000.0 * 1001 / 2, 1000, 1};
    QCOMPARE(c.step_seconds(w), 2.5005 + 0.001);
    // One decode token at position 1000: FLOPs 2e9 + 1e6 x 1001 = 3.001e9 -> 0.003001 s; bytes
    // 1e9 + 1e5 x 1001 = 1.1001e9 -> 0.011001 s. Bandwidth-bound.
    StepWork d{1, 1001, 1001, 1};
    QVERIFY(std::fabs(c.step_seconds(d) - (0.011001 + 0.001)) < 1e-12);
    QCOMPARE(c.transfer_seconds(512), 512 * 1e5 / 1e9);
    CostModel bad = c;
    bad.mfu = 0;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, bad.check());
    QVERIFY(find_hardware_profile("h200"));
    QVERIFY(!find_hardware_profile("tpu"));
  }

  void timed_single_request_by_hand() {
    // 1024 prompt tokens, 3 output tokens, block size 16, one instance with room to spare.
    TimedOptions o;
    o.cost = simple_cost();
    o.max_batched_tokens = 4096;
    const TimedResult r = timed_replay(std::vector<TraceRequest>{req(1024, {1, 2}, 0, 3)}, FleetOptions{}, opts(16), o);
    const double prefill = o.cost.step_seconds({1024, 1024.0 * 1025 / 2, 1024, 1});
    const double d1 = o.cost.step_seconds({1, 1025, 1025, 1}), d2 = o.cost.step_seconds({1, 1026, 1026, 1});
    QCOMPARE(r.finished, int64_t{1});
    QCOMPARE(r.ttft_s.max, prefill);
    QCOMPARE(r.queue_s.max, 0.0);
    QVERIFY(std::fabs(r.e2e_s.max - (prefill + d1 + d2)) < 1e-12);
    QVERIFY(std::fabs(r.tpot_s.max - (d1 + d2) / 2) < 1e-12);
    QCOMPARE(r.total.steps, int64_t{3});
  }

  void timed_queueing_preemption_and_rejection() {
    TimedOptions o;
    o.cost = simple_cost();
    o.max_batched_tokens = 512;
    // Far apart: no queueing, and the second request hits the first one's prefix.
    std::vector<TraceRequest> t = {req(1024, {1, 2}, 0, 2), req(1024, {1, 2}, 100000, 2)};
    FleetOptions f;
    f.gpu_tokens = 4096;
    TimedResult r = timed_replay(t, f, opts(16), o);
    QCOMPARE(r.finished, int64_t{2});
    QCOMPARE(r.queue_s.max, 0.0);
    QCOMPARE(r.total.cache.gpu_hit_tokens, uint64_t{1008});  // 63 full blocks of 16 (never the last token's)
    // Eight long requests at once into a pool too small for all of them to grow: preemptions,
    // yet everything finishes; one request bigger than the pool is rejected.
    t.clear();
    for (int i = 0; i < 8; ++i) t.push_back(req(300, {i}, 0, 200));  // distinct prompts
    t.push_back(req(5000, {}, 0, 1));
    f.gpu_tokens = 2048;
    r = timed_replay(t, f, opts(16), o);
    QCOMPARE(r.finished, int64_t{8});
    QCOMPARE(r.total.rejected, int64_t{1});
    QVERIFY(r.total.preemptions > 0);
    QVERIFY(r.queue_s.max > 0);
  }

  void timed_cpu_tier_loads_cost_transfer_time() {
    // A, then B evicting most of A from a 160-block GPU pool into the CPU tier, then A again:
    // all of A's prompt but the last token's block hits, partly from the CPU tier, whose load
    // is charged over the host link.
    TimedOptions o;
    o.cost = simple_cost();
    const TraceRequest A = req(2048, {1, 2, 3, 4}, 0), B = req(2048, {5, 6, 7, 8}, 100000);
    TraceRequest A2 = A;
    A2.timestamp_ms = 200000;
    FleetOptions f;
    f.gpu_tokens = 160 * 16;
    f.cpu_tokens = 1 << 20;
    const TimedResult r = timed_replay(std::vector<TraceRequest>{A, B, A2}, f, opts(16), o);
    QCOMPARE(r.finished, int64_t{3});
    QCOMPARE(r.total.cache.gpu_hit_tokens + r.total.cache.cpu_hit_tokens, uint64_t{2032});
    QVERIFY(r.total.cache.cpu_hit_tokens > 0);
    QCOMPARE(r.total.transfer_s, o.cost.transfer_seconds(static_cast<int64_t>(r.total.cache.cpu_hit_tokens)));
  }

  void timed_fleet_splits_the_work() {
    TimedOptions o;
    o.cost = simple_cost();
    std::vector<TraceRequest> t;
    for (int i = 0; i < 12; ++i) t.push_back(req(512, {i % 3}, i * 10, 4));
    FleetOptions f;
    f.instances = 3;
    f.router = RouterKind::PrefixAware;
    const TimedResult r = timed_replay(t, f, opts(16), o);
    QCOMPARE(r.finished, int64_t{12});
    int64_t total = 0;
    for (const TimedInstanceStats& s : r.instances) total += s.cache.requests;
    QCOMPARE(total, int64_t{12});
    QVERIFY(!r.pool.empty());
    QCOMPARE(r.pool.front().used.size(), size_t{3});
  }
};

QTEST_GUILESS_MAIN(TestReplayFleet)
#include "test_replay_fleet.moc"
