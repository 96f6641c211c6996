// The contiguous pre-paging baseline: first-fit, merging, fragmentation and waste, and the same
// workload through the same Scheduler on both the baseline and the paged manager.
#include <algorithm>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "engine/scheduler.h"
#include "kv/contiguous_allocator.h"
#include "kv/contiguous_kv_manager.h"
#include "kv/kv_cache_manager.h"
#include "test_support.h"

using namespace kvscope;

class TestContiguousBaseline : public QObject {
  Q_OBJECT
 private slots:
  void first_fit();
  void merge_on_free();
  void external_fragmentation();
  void waste_on_known_workload();
  void overflow_is_reported();
  void manager_interface();
  void same_workload_through_the_scheduler();
  void reservation_policies();
  void request_policy_blocks_on_fragmentation();
  void fixed_policy_grows_moves_and_preempts();
  void every_policy_same_work_through_the_scheduler();
};

void TestContiguousBaseline::first_fit() {
  ContiguousAllocator a(100);
  QCOMPARE(*a.reserve(1, 30), 0);
  QCOMPARE(*a.reserve(2, 30), 30);
  QCOMPARE(*a.reserve(3, 30), 60);
  a.release(2);                     // hole [30, 60)
  QCOMPARE(*a.reserve(4, 20), 30);  // first fit: the hole, not the tail [90, 100)
  QCOMPARE(*a.reserve(5, 10), 50);  // the rest of the hole before the tail
  QCOMPARE(*a.reserve(6, 10), 90);
  QVERIFY(!a.reserve(7, 1).has_value());
  QCOMPARE(a.metrics().failed_reservations, 1u);
  QCOMPARE(a.metrics().live_allocations, 5);
  QVERIFY_THROWS_EXCEPTION(std::logic_error, a.reserve(4, 5));  // one reservation per sequence
  a.validate();
}

void TestContiguousBaseline::merge_on_free() {
  ContiguousAllocator a(90);
  a.reserve(1, 30);
  a.reserve(2, 30);
  a.reserve(3, 30);
  a.release(1);
  a.release(3);
  QCOMPARE(a.ranges().size(), size_t(3));  // free | 2 | free
  a.release(2);                            // merges with both neighbours
  const auto r = a.ranges();
  QCOMPARE(r.size(), size_t(1));
  QCOMPARE(r[0].start, int64_t(0));
  QCOMPARE(r[0].length, int64_t(90));
  QCOMPARE(r[0].owner, kFreeRange);
  QCOMPARE(*a.reserve(4, 90), 0);
  a.validate();
  a.release(42);  // unknown: no-op
  a.validate();
}

void TestContiguousBaseline::external_fragmentation() {
  // 5 reservations of 20 in 100 slots; free every other one: 3 holes of 20 = 60 free slots,
  // yet a request for 40 does not fit anywhere.
  ContiguousAllocator a(100);
  for (SeqId s = 1; s <= 5; ++s) a.reserve(s, 20);
  a.release(1);
  a.release(3);
  a.release(5);
  const auto m = a.metrics();
  QCOMPARE(m.total_free, int64_t(60));
  QCOMPARE(m.largest_free_run, int64_t(20));
  QCOMPARE(m.external_fragmentation, 1.0 - 20.0 / 60.0);
  QVERIFY(!a.can_reserve(40));
  QVERIFY(!a.reserve(6, 40).has_value());
  QVERIFY(a.can_reserve(20));
  const auto full = ContiguousAllocator(10);
  QCOMPARE(full.metrics().external_fragmentation, 0.0);
  ContiguousAllocator none(10);
  none.reserve(1, 10);
  QCOMPARE(none.metrics().external_fragmentation, 0.0);  // nothing free: defined as 0
  a.validate();
}

void TestContiguousBaseline::waste_on_known_workload() {
  // Three requests each reserve max_model_len = 100 but hold 10, 20 and 30 tokens.
  ContiguousAllocator a(400);
  for (SeqId s = 1; s <= 3; ++s) a.reserve(s, 100);
  a.set_filled(1, 10);
  a.set_filled(2, 20);
  a.set_filled(3, 30);
  auto m = a.metrics();
  QCOMPARE(m.slots_reserved, int64_t(300));
  QCOMPARE(m.slots_filled, int64_t(60));
  QCOMPARE(m.waste_pct, 80.0);
  QCOMPARE(m.peak_reserved, int64_t(300));
  a.release(3);
  m = a.metrics();
  QCOMPARE(m.waste_pct, 100.0 * (1.0 - 30.0 / 200.0));
  QCOMPARE(m.peak_reserved, int64_t(300));
  QCOMPARE(ContiguousAllocator(10).metrics().waste_pct, 0.0);
  a.validate();
}

void TestContiguousBaseline::overflow_is_reported() {
  ContiguousAllocator a(50);
  a.reserve(1, 10);
  QVERIFY(a.set_filled(1, 10));
  QVERIFY(!a.set_filled(1, 11));
  QCOMPARE(a.metrics().overflows, 1u);
  QCOMPARE(a.filled(1), 10);
  a.validate();
}

void TestContiguousBaseline::manager_interface() {
  ContiguousKvManager kv(64, 16);
  const std::vector<TokenId> t{1, 2, 3, 4, 5};
  QCOMPARE(kv.attach_cached_prefix(1, t), 0);
  QCOMPARE(kv.blocks_needed(1, 5), 16);  // the whole worst case up front
  QVERIFY(kv.allocate_slots(1, t, 5));
  QCOMPARE(kv.blocks_needed(1, 1), 0);
  QCOMPARE(kv.slot(1, 3), kv.arena().base(1) + 3);
  QCOMPARE(kv.arena().metrics().slots_reserved, int64_t(16));
  QCOMPARE(kv.arena().metrics().slots_filled, int64_t(5));
  kv.fork(1, 2);  // no sharing: a second reservation and a full copy, one slot per unit here
  const auto copies = kv.take_pending_copies();
  QCOMPARE(copies.size(), size_t(5));
  for (int i = 0; i < 5; ++i) {
    QCOMPARE(int64_t(copies[i].src), kv.arena().base(1) + i);
    QCOMPARE(int64_t(copies[i].dst), kv.arena().base(2) + i);
    QCOMPARE(copies[i].n_slots, 1);
  }
  QVERIFY(kv.never_fits(16, 8).empty());
  QVERIFY(!kv.never_fits(17, 8).empty());
  QVERIFY(!ContiguousKvManager(8, 16).never_fits(4, 4).empty());
  std::vector<TokenId> longer(17, 7);
  QVERIFY(!kv.allocate_slots(1, longer, 12));  // beyond max_model_len: refused and counted
  QCOMPARE(kv.counters().overflows, 1u);
  QCOMPARE(kv.counters().refused_overflows, 1u);
  QCOMPARE(kv.seq_len(1), 5);
  kv.validate();
  kv.free(1);
  kv.free(2);
  QCOMPARE(kv.arena().metrics().live_allocations, 0);
  kv.validate();
}

namespace {

struct RunStats {
  int steps = 0;
  int finished = 0;
  int max_running = 0;
  uint64_t preemptions = 0;
  double worst_waste_pct = 0;  // reserved-but-unfilled / reserved, worst step
  std::vector<std::vector<TokenId>> outputs;
};

struct Spec {
  int32_t prompt;
  int32_t max_new;
};

// Twelve requests of 10-22 prompt and 6-10 new tokens.
std::vector<Spec> twelve_requests() {
  std::vector<Spec> specs;
  for (int i = 0; i < 12; ++i) specs.push_back({10 + (i * 7) % 13, 6 + i % 5});
  return specs;
}

// The Engine's loop in miniature over the given requests (ids 1..n), against whichever allocator
// the scheduler was given. after_step() runs after every step (validation, tracking); when it
// returns {reserved slots, filled slots} the worst step's waste is kept too.
template <class AfterStep>
RunStats run_specs(Scheduler& sched, const std::vector<Spec>& specs, AfterStep after_step) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<SeqId>(i + 1);
    std::vector<TokenId> prompt(static_cast<size_t>(specs[i].prompt));
    std::iota(prompt.begin(), prompt.end(), static_cast<TokenId>(100 * i));
    s->set_prompt(std::move(prompt));
    s->max_new_tokens = specs[i].max_new;
    sched.add(s.get());
    seqs.push_back(std::move(s));
  }
  RunStats st;
  while (sched.has_work() && st.steps < 5000) {
    const auto out = sched.schedule();
    sched.on_step_done(out);
    for (const auto& c : out.chunks) {
      if (!c.wants_logits) continue;
      c.seq->tokens.push_back(static_cast<TokenId>(c.seq->id * 1000 + c.seq->output().size()));
      if (static_cast<int32_t>(c.seq->output().size()) >= c.seq->max_new_tokens) {
        sched.finish(c.seq, SeqState::Finished);
        ++st.finished;
      }
    }
    st.max_running = std::max(st.max_running, static_cast<int>(out.chunks.size()));
    if constexpr (std::is_void_v<decltype(after_step())>) {
      after_step();
    } else {
      const auto [reserved, filled] = after_step();
      if (reserved > 0)
        st.worst_waste_pct = std::max(st.worst_waste_pct, 100.0 * (1.0 - double(filled) / double(reserved)));
    }
    ++st.steps;
  }
  st.preemptions = sched.preemptions();
  for (const auto& s : seqs) st.outputs.push_back(s->output_tokens());
  return st;
}

}  // namespace

void TestContiguousBaseline::same_workload_through_the_scheduler() {
  // Same memory for both: 256 token slots. The baseline reserves max_model_len = 64 per request.
  SchedulerConfig sc;
  sc.max_running = 16;
  sc.max_batched_tokens = 128;
  sc.max_model_len = 64;

  ContiguousKvManager contiguous(256, sc.max_model_len);
  Scheduler sched_c(sc, contiguous);
  const RunStats c = run_specs(sched_c, twelve_requests(), [&] {
    contiguous.validate();
    const auto m = contiguous.arena().metrics();
    return std::pair<int64_t, int64_t>{m.slots_reserved, m.slots_filled};
  });

  KvCacheConfig kc;
  kc.block_size = 8;
  kc.num_blocks = 32;
  kc.prefix_caching = false;
  KvCacheManager paged(kc);
  Scheduler sched_p(sc, paged);
  const RunStats p = run_specs(sched_p, twelve_requests(), [&] {
    paged.validate();
    int64_t reserved = 0, filled = 0;
    for (SeqId id : paged.sequences()) {
      reserved += int64_t(paged.blocks_held(id)) * kc.block_size;
      filled += paged.seq_len(id);
    }
    return std::pair<int64_t, int64_t>{reserved, filled};
  });

  qInfo("contiguous: %d steps, <= %d running, worst waste %.1f%%; paged: %d steps, <= %d running, worst waste %.1f%%",
        c.steps, c.max_running, c.worst_waste_pct, p.steps, p.max_running, p.worst_waste_pct);
  QCOMPARE(c.finished, 12);
  QCOMPARE(p.finished, 12);
  QCOMPARE(c.outputs, p.outputs);  // same work done, whatever the allocator
  QCOMPARE(c.max_running, 4);      // 256 / 64: at most 4 reservations live
  QVERIFY2(p.max_running > c.max_running, qPrintable(QString("paged ran at most %1").arg(p.max_running)));
  QVERIFY(p.steps < c.steps);
  // Pre-allocation wastes most of what it reserves; paging only the tail of each last block.
  QVERIFY2(c.worst_waste_pct > 60.0, qPrintable(QString::number(c.worst_waste_pct)));
  QVERIFY2(p.worst_waste_pct < 35.0, qPrintable(QString::number(p.worst_waste_pct)));
  QCOMPARE(contiguous.arena().metrics().peak_reserved, int64_t(256));
  QCOMPARE(contiguous.counters().overflows, 0u);
  QCOMPARE(paged.pool().num_used(), 0);
  QCOMPARE(contiguous.arena().metrics().live_allocations, 0);
}

void TestContiguousBaseline::reservation_policies() {
  QVERIFY(!parse_baseline_reserve("").has_value());
  QVERIFY(!parse_baseline_reserve("0").has_value());
  QVERIFY(!parse_baseline_reserve("12x").has_value());
  QCOMPARE(parse_baseline_reserve("max-model-len")->kind, BaselineReserveKind::MaxModelLen);
  QCOMPARE(parse_baseline_reserve("request")->kind, BaselineReserveKind::Request);
  QCOMPARE(parse_baseline_reserve("256")->fixed_slots, 256);
  QCOMPARE(baseline_reserve_name(*parse_baseline_reserve("256")), std::string("256"));
  // Sizes, in units of 4 slots: max_model_len 64 in a 256-slot arena.
  const ContiguousKvManager mml(256, 64, {}, 4);
  QCOMPARE(mml.reservation_for(5, 20), 64);
  const ContiguousKvManager req(256, 64, {BaselineReserveKind::Request, 0}, 4);
  QCOMPARE(req.reservation_for(5, 18), 20);   // its own worst case, rounded up to the unit
  QCOMPARE(req.reservation_for(5, 500), 64);  // never beyond max_model_len
  QCOMPARE(req.reservation_for(30, 18), 32);  // at least the first chunk (a resumed sequence)
  const ContiguousKvManager fixed(256, 64, {BaselineReserveKind::Fixed, 10}, 4);
  QCOMPARE(fixed.reservation_for(5, 64), 12);
  QCOMPARE(fixed.reservation_for(30, 64), 32);
  QVERIFY_THROWS_EXCEPTION(std::invalid_argument, ContiguousKvManager(64, 16, {BaselineReserveKind::Fixed, 0}));
}

void TestContiguousBaseline::request_policy_blocks_on_fragmentation() {
  // 100 slots; each request reserves prompt + max_new: A 20, B 30, C 20, D 30 fill the arena.
  // A and C finish first and leave two holes of 20: 40 free slots in all, yet E (40) does not
  // fit until B or D finishes. With max-model-len every reservation is 100: one at a time, and
  // a freed reservation always fits the next request, so fragmentation never blocks anyone.
  SchedulerConfig sc;
  sc.max_running = 16;
  sc.max_batched_tokens = 128;
  sc.max_model_len = 100;
  const std::vector<Spec> specs = {{5, 15}, {5, 25}, {5, 15}, {5, 25}, {5, 35}};
  ContiguousKvManager kv(100, sc.max_model_len, {BaselineReserveKind::Request, 0});
  Scheduler sched(sc, kv);
  int64_t worst_free = 0, worst_run = 0;
  const RunStats r = run_specs(sched, specs, [&] {
    kv.validate();
    const auto m = kv.arena().metrics();
    if (m.total_free > worst_free) worst_free = m.total_free, worst_run = m.largest_free_run;
  });
  const BaselineCounters& c = kv.counters();
  qInfo("request policy: %llu blocked steps, %llu by fragmentation", (unsigned long long)c.blocked_admission_steps,
        (unsigned long long)c.blocked_by_fragmentation_steps);
  QCOMPARE(r.outputs[4].size(), size_t(35));
  QVERIFY(c.blocked_admission_steps > c.blocked_by_fragmentation_steps);  // at first nothing was free
  QVERIFY(c.blocked_by_fragmentation_steps >= 5);
  QCOMPARE(c.overflows, 0u);
  QCOMPARE(kv.arena().metrics().live_allocations, 0);

  // The same dry run directly: two holes of 20, a request of 40.
  ContiguousKvManager direct(100, 100, {BaselineReserveKind::Request, 0});
  const std::vector<TokenId> t(5, 1);
  for (SeqId s = 1; s <= 4; ++s) {
    direct.attach_cached_prefix(s, t);
    direct.set_max_len(s, s % 2 ? 20 : 30);
    QVERIFY(direct.allocate_slots(s, t, 5));
  }
  direct.free(1);
  direct.free(3);
  QCOMPARE(direct.arena().metrics().total_free, int64_t(40));
  QVERIFY(!direct.can_admit(t, 5, 40));
  QVERIFY(direct.can_admit(t, 5, 20));
  direct.admission_blocked(t, 5, 40);
  QCOMPARE(direct.counters().blocked_by_fragmentation_steps, 1u);
  direct.admission_blocked(t, 5, 80);  // more than is free at all: blocked, not by fragmentation
  QCOMPARE(direct.counters().blocked_admission_steps, 2u);
  QCOMPARE(direct.counters().blocked_by_fragmentation_steps, 1u);
  direct.validate();
}

void TestContiguousBaseline::fixed_policy_grows_moves_and_preempts() {
  // Units of 4 slots (a block size), 64 slots, a fixed guess of 8.
  ContiguousKvManager kv(64, 64, {BaselineReserveKind::Fixed, 8}, 4);
  std::vector<TokenId> t(40, 3);
  for (SeqId s = 1; s <= 2; ++s) {
    kv.attach_cached_prefix(s, t);
    QVERIFY(kv.allocate_slots(s, t, 8));
  }
  QCOMPARE(kv.arena().base(1), int64_t(0));
  QCOMPARE(kv.arena().base(2), int64_t(8));
  QCOMPARE(kv.arena().reserved(2), 8);

  // 2 outgrows its 8 slots; the run after it is free: it doubles in place, nothing is copied.
  QVERIFY(kv.allocate_slots(2, t, 1));
  QCOMPARE(kv.arena().base(2), int64_t(8));
  QCOMPARE(kv.arena().reserved(2), 16);
  QCOMPARE(kv.counters().grown_in_place, 1u);
  QVERIFY(kv.take_pending_copies().empty());

  // 1 outgrows its 8 slots with 2 right after it: it moves to the first free run of 16, and
  // its 8 filled slots are copied there, block by block.
  QVERIFY(kv.allocate_slots(1, t, 1));
  QCOMPARE(kv.counters().relocations, 1u);
  QCOMPARE(kv.counters().relocated_slots, 8u);
  const int64_t moved_to = kv.arena().base(1);
  QCOMPARE(moved_to, int64_t(24));
  QCOMPARE(kv.arena().reserved(1), 16);
  QCOMPARE(kv.slot(1, 8), moved_to + 8);
  const auto copies = kv.take_pending_copies();
  QCOMPARE(copies.size(), size_t(2));
  for (int i = 0; i < 2; ++i) {
    QCOMPARE(copies[size_t(i)].src, BlockId(i));                 // old slots [0, 8) = blocks 0, 1
    QCOMPARE(copies[size_t(i)].dst, BlockId(moved_to / 4 + i));  // new slots [24, 32) = blocks 6, 7
    QCOMPARE(copies[size_t(i)].n_slots, 4);
  }
  QCOMPARE(kv.arena().metrics().total_free, int64_t(64 - 32));
  kv.validate();

  // 3 takes 20 slots at [40, 60); free are [0, 8) and [60, 64). 2 (9 tokens in 16) needs 17:
  // neither in place nor anywhere else. allocate_slots fails and changes nothing; the retry
  // (the scheduler preempts a newer sequence and tries again) is not a second overflow.
  kv.attach_cached_prefix(3, t);
  QVERIFY(kv.allocate_slots(3, t, 20));
  QCOMPARE(kv.arena().base(3), int64_t(40));
  QVERIFY(kv.allocate_slots(2, t, 7));  // 16 of 16
  QVERIFY(!kv.allocate_slots(2, t, 1));
  QVERIFY(!kv.allocate_slots(2, t, 1));
  QCOMPARE(kv.counters().overflows, 3u);
  QCOMPARE(kv.seq_len(2), 16);
  QCOMPARE(kv.arena().reserved(2), 16);
  kv.validate();
  // Preempted (recompute): freed while its growth was pending.
  kv.free(2);
  QCOMPARE(kv.counters().overflow_preemptions, 1u);
  kv.validate();
  // Free now: [0, 24) (merged) and [60, 64). 3 (20 of 20) needs 21: doubling to 40 fits
  // nowhere, but what it needs (24) fits in place, in the 4 slots after it.
  QVERIFY(kv.allocate_slots(3, t, 1));
  QCOMPARE(kv.arena().base(3), int64_t(40));
  QCOMPARE(kv.arena().reserved(3), 24);
  QCOMPARE(kv.counters().grown_in_place, 2u);
  QVERIFY(kv.take_pending_copies().empty());
  // 1 (at [24, 40)) fills its 16 and needs 17: 32 fits nowhere, 20 fits at [0, 20); its 16
  // filled slots are copied as 4 blocks of 4.
  QVERIFY(kv.allocate_slots(1, t, 7));
  QVERIFY(kv.allocate_slots(1, t, 1));
  QCOMPARE(kv.arena().base(1), int64_t(0));
  QCOMPARE(kv.arena().reserved(1), 20);
  QCOMPARE(kv.counters().relocations, 2u);
  QCOMPARE(kv.counters().relocated_slots, 8u + 16u);
  const auto again = kv.take_pending_copies();
  QCOMPARE(again.size(), size_t(4));
  for (int i = 0; i < 4; ++i) {
    QCOMPARE(again[size_t(i)].src, BlockId(24 / 4 + i));
    QCOMPARE(again[size_t(i)].dst, BlockId(i));
  }
  QCOMPARE(kv.counters().overflows, 5u);
  QCOMPARE(kv.slot(1, 16), int64_t(16));
  kv.validate();
}

void TestContiguousBaseline::every_policy_same_work_through_the_scheduler() {
  // Same requests, 256 slots in blocks of 8, max_model_len 64, on every policy and on paging:
  // the same outputs; a small fixed guess must grow, move or preempt, never stop a sequence.
  SchedulerConfig sc;
  sc.max_running = 16;
  sc.max_batched_tokens = 128;
  sc.max_model_len = 64;
  std::vector<Spec> specs;
  for (int i = 0; i < 16; ++i) specs.push_back({10 + (i * 7) % 13, 6 + (i * 11) % 31});

  KvCacheConfig kc;
  kc.block_size = 8;
  kc.num_blocks = 32;
  kc.prefix_caching = false;
  KvCacheManager paged(kc);
  Scheduler sched_p(sc, paged);
  const RunStats want = run_specs(sched_p, specs, [&] { paged.validate(); });

  const BaselineReserve policies[] = {{BaselineReserveKind::MaxModelLen, 0},
                                      {BaselineReserveKind::Request, 0},
                                      {BaselineReserveKind::Fixed, 24},
                                      {BaselineReserveKind::Fixed, 8}};
  for (const BaselineReserve& pol : policies) {
    ContiguousKvManager kv(256, sc.max_model_len, pol, 8);
    Scheduler sched(sc, kv);
    const RunStats got = run_specs(sched, specs, [&] { kv.validate(); });
    const BaselineCounters& c = kv.counters();
    qInfo(
        "%s: %d steps, %llu preemptions, overflows %llu (in place %llu, moved %llu, preempted %llu), blocked %llu (frag %llu)",
        baseline_reserve_name(pol).c_str(), got.steps, (unsigned long long)sched.preemptions(),
        (unsigned long long)c.overflows, (unsigned long long)c.grown_in_place, (unsigned long long)c.relocations,
        (unsigned long long)c.overflow_preemptions, (unsigned long long)c.blocked_admission_steps,
        (unsigned long long)c.blocked_by_fragmentation_steps);
    QCOMPARE(got.outputs, want.outputs);
    QCOMPARE(c.refused_overflows, 0u);
    QCOMPARE(c.overflows, c.grown_in_place + c.relocations + c.overflow_preemptions);
    QCOMPARE(kv.arena().metrics().live_allocations, 0);
    if (pol.kind != BaselineReserveKind::Fixed) QCOMPARE(c.overflows, 0u);
    if (pol.kind == BaselineReserveKind::Fixed && pol.fixed_slots == 8) {
      QVERIFY(c.grown_in_place > 0);
      QVERIFY(c.relocations > 0);
    }
  }
}

QTEST_APPLESS_MAIN(TestContiguousBaseline)
#include "test_contiguous_baseline.moc"
