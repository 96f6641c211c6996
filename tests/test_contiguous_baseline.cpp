// The contiguous pre-paging baseline: first-fit, merging, fragmentation and waste, and the same
// workload through the same Scheduler on both the baseline and the paged manager.
#include <algorithm>
#include <memory>
#include <numeric>
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
};

void TestContiguousBaseline::first_fit() {
  ContiguousAllocator a(100);
  QCOMPARE(*a.reserve(1, 30), 0);
  QCOMPARE(*a.reserve(2, 30), 30);
  QCOMPARE(*a.reserve(3, 30), 60);
  a.release(2);                   // hole [30, 60)
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
  kv.fork(1, 2);  // no sharing: a second reservation and a full copy
  const auto copies = kv.take_pending_copies();
  QCOMPARE(copies.size(), size_t(1));
  QCOMPARE(int64_t(copies[0].src), kv.arena().base(1));
  QCOMPARE(int64_t(copies[0].dst), kv.arena().base(2));
  QCOMPARE(copies[0].n_slots, 5);
  QVERIFY(kv.never_fits(16, 8).empty());
  QVERIFY(!kv.never_fits(17, 8).empty());
  QVERIFY(!ContiguousKvManager(8, 16).never_fits(4, 4).empty());
  std::vector<TokenId> longer(17, 7);
  QVERIFY(!kv.allocate_slots(1, longer, 12));  // beyond the reservation: refused and counted
  QCOMPARE(kv.arena().metrics().overflows, 1u);
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
  double worst_waste_pct = 0;        // reserved-but-unfilled / reserved, worst step
  std::vector<std::vector<TokenId>> outputs;
};

// The Engine's loop in miniature, against whichever allocator the scheduler was given.
// waste(): {reserved slots, filled slots} of the allocator after each step.
template <class WasteFn>
RunStats run_workload(Scheduler& sched, WasteFn waste) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < 12; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = i + 1;
    s->prompt.resize(10 + (i * 7) % 13);
    std::iota(s->prompt.begin(), s->prompt.end(), 100 * i);
    s->max_new_tokens = 6 + i % 5;
    sched.add(s.get());
    seqs.push_back(std::move(s));
  }
  RunStats st;
  while (sched.has_work() && st.steps < 2000) {
    const auto out = sched.schedule();
    sched.on_step_done(out);
    for (const auto& c : out.chunks) {
      if (!c.wants_logits) continue;
      c.seq->output.push_back(static_cast<TokenId>(c.seq->id * 1000 + c.seq->output.size()));
      if (static_cast<int32_t>(c.seq->output.size()) >= c.seq->max_new_tokens) {
        sched.finish(c.seq, SeqState::Finished);
        ++st.finished;
      }
    }
    st.max_running = std::max(st.max_running, static_cast<int>(out.chunks.size()));
    const auto [reserved, filled] = waste();
    if (reserved > 0) st.worst_waste_pct = std::max(st.worst_waste_pct, 100.0 * (1.0 - double(filled) / double(reserved)));
    ++st.steps;
  }
  st.preemptions = sched.preemptions();
  for (const auto& s : seqs) st.outputs.push_back(s->output);
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
  const RunStats c = run_workload(sched_c, [&] {
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
  const RunStats p = run_workload(sched_p, [&] {
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
  QCOMPARE(c.max_running, 4);     // 256 / 64: at most 4 reservations live
  QVERIFY2(p.max_running > c.max_running, qPrintable(QString("paged ran at most %1").arg(p.max_running)));
  QVERIFY(p.steps < c.steps);
  // Pre-allocation wastes most of what it reserves; paging only the tail of each last block.
  QVERIFY2(c.worst_waste_pct > 60.0, qPrintable(QString::number(c.worst_waste_pct)));
  QVERIFY2(p.worst_waste_pct < 35.0, qPrintable(QString::number(p.worst_waste_pct)));
  QCOMPARE(contiguous.arena().metrics().peak_reserved, int64_t(256));
  QCOMPARE(contiguous.arena().metrics().overflows, 0u);
  QCOMPARE(paged.pool().num_used(), 0);
  QCOMPARE(contiguous.arena().metrics().live_allocations, 0);
}

QTEST_APPLESS_MAIN(TestContiguousBaseline)
#include "test_contiguous_baseline.moc"
