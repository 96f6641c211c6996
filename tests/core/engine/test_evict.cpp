// Token eviction (--evict h2o / snapkv): the attention kernel with a hole mask against a scalar
// softmax over the kept tokens only, the weights it records against the same reference, the
// H2O selection on a synthetic model, blocks returned to the pool, compaction leaving logits
// bit-identical, referenced blocks never evicted or freed, and config validation.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "cpu/cpu_backend.h"
#include "engine/config_validation.h"
#include "engine/engine.h"
#include "engine/token_eviction.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "telemetry/snapshot_json.h"
#include "evict_harness.h"
#include "test_support.h"

using namespace kvscope;
using namespace kvscope::test;

class TestEvict : public QObject {
  Q_OBJECT
 private slots:
  // The kernel alone: keys/values stored at scattered slots of a shuffled table, a hole mask
  // over some of them (and a freed block), against a double-precision softmax over the kept
  // rows only. The weights recorded for H2O equal that reference's probabilities.
  void slot_mask_attention_equals_attention_over_kept_tokens() {
    const auto m = synthetic(3);
    const ModelConfig& c = m->config;
    const int32_t bs = 16, n_blocks = 12, n = 150, d = c.head_dim, n_q = c.n_head / c.n_head_kv;
    CpuBackend be(m, 2);
    be.init_kv(layout_of(*m, bs, n_blocks), {});
    std::vector<BlockId> table(static_cast<size_t>((n + bs - 1) / bs));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937_64(5));
    std::vector<uint8_t> holes(static_cast<size_t>(n_blocks) * bs, 0);
    std::mt19937_64 rng(9);
    std::vector<uint8_t> kept(static_cast<size_t>(n), 1);
    for (int32_t p = 0; p < n - 1; ++p)
      if (rng() % 3 == 0 || (p >= 32 && p < 48)) kept[static_cast<size_t>(p)] = 0;  // rows 32..47: a whole block
    const std::vector<float> K = randn(static_cast<size_t>(n) * c.n_head_kv * d, 1), V = randn(K.size(), 2);
    auto slot = [&](int32_t p) { return static_cast<int64_t>(table[static_cast<size_t>(p / bs)]) * bs + p % bs; };
    for (int32_t p = 0; p < n; ++p) {
      for (int32_t g = 0; g < c.n_head_kv; ++g) {
        const size_t off = (static_cast<size_t>(p) * c.n_head_kv + g) * d;
        be.kv_storage().store(0, false, slot(p), g, &K[off]);
        be.kv_storage().store(0, true, slot(p), g, &V[off]);
      }
      if (!kept[static_cast<size_t>(p)]) holes[static_cast<size_t>(slot(p))] = 1;
    }
    std::vector<BlockId> shown = table;
    shown[2] = kNoBlock;  // the fully evicted block was given back: attention must not read it
    BatchView b;
    b.block_tables.push_back(shown);
    b.tokens = {5};
    b.positions = {n - 1};
    b.slot_mapping = {slot(n - 1)};
    b.seq_index = {0};
    b.holes = holes;
    b.record_attention = {1};
    const std::vector<float> q = randn(static_cast<size_t>(c.q_dim()), 7);
    std::vector<float> out(q.size());
    be.attention(0, b, q.data(), out.data());
    std::vector<double> weight(static_cast<size_t>(n), 0.0);
    for (int32_t h = 0; h < c.n_head; ++h) {
      const int32_t g = h / n_q;
      std::vector<double> s(static_cast<size_t>(n), -INFINITY);
      double mx = -INFINITY, sum = 0;
      for (int32_t p = 0; p < n; ++p) {
        if (!kept[static_cast<size_t>(p)]) continue;
        double dot = 0;
        for (int32_t i = 0; i < d; ++i)
          dot += double(q[static_cast<size_t>(h * d + i)]) * K[(static_cast<size_t>(p) * c.n_head_kv + g) * d + i];
        s[static_cast<size_t>(p)] = dot * c.attn_scale;
        mx = std::max(mx, s[static_cast<size_t>(p)]);
      }
      for (int32_t p = 0; p < n; ++p)
        sum += kept[static_cast<size_t>(p)] ? std::exp(s[static_cast<size_t>(p)] - mx) : 0.0;
      for (int32_t i = 0; i < d; ++i) {
        double o = 0;
        for (int32_t p = 0; p < n; ++p)
          if (kept[static_cast<size_t>(p)])
            o += std::exp(s[static_cast<size_t>(p)] - mx) / sum * V[(static_cast<size_t>(p) * c.n_head_kv + g) * d + i];
        QVERIFY2(std::abs(o - out[static_cast<size_t>(h * d + i)]) < 1e-5,
                 "masked attention differs from the kept-only reference");
      }
      for (int32_t p = 0; p < n; ++p)
        if (kept[static_cast<size_t>(p)])
          weight[static_cast<size_t>(p)] += std::exp(s[static_cast<size_t>(p)] - mx) / sum;
    }
    const auto mass = be.attention_mass();
    for (int32_t p = 0; p < n; ++p) {
      const double got = kept[static_cast<size_t>(p)] ? mass[static_cast<size_t>(slot(p))] : 0.0;
      QVERIFY2(std::abs(got - weight[static_cast<size_t>(p)]) < 1e-5,
               "recorded attention weight differs from the reference softmax");
      if (!kept[static_cast<size_t>(p)])
        QCOMPARE(mass[static_cast<size_t>(slot(p))], 0.0f);  // a hole is never credited
    }
  }

  void lowest_scored_rows_picks_the_smallest_that_may_go() {
    const std::vector<float> score = {9, 1, 5, 0.5f, 7, 2, 3, 8};
    const std::vector<uint8_t> may_go = {0, 1, 1, 1, 1, 1, 0, 0};
    QCOMPARE(lowest_scored_rows(score, may_go, 8, 5), (std::vector<int32_t>{1, 3, 5}));
    QCOMPARE(lowest_scored_rows(score, may_go, 8, 8), std::vector<int32_t>{});
    QCOMPARE(lowest_scored_rows(score, may_go, 8, 0).size(), size_t{5});  // only 5 may go
    const std::vector<uint8_t> live = {1, 1, 1, 1, 1, 1, 1, 1};
    QCOMPARE(max_pool(score, live, 3)[3], 7.0f);  // max of rows 2..4
  }

  // H2O through the engine, one token a step: after every step the sequence keeps exactly its
  // sinks, its recent window and the (budget - sinks - recent) rows with the most accumulated
  // attention among the others (the weights the kernel recorded, read before the eviction).
  void h2o_keeps_top_budget_plus_recent() {
    const auto m = synthetic(4);
    EngineConfig ec;
    ec.block_size = 8;
    ec.num_blocks = 64;
    ec.prefix_caching = false;
    ec.sinks = 2;
    ec.evict = parse_evict("h2o:24:6");
    ec.sched.max_batched_tokens = 1;
    Engine e(m, std::make_unique<CpuBackend>(m, 1), ec);
    Request r;
    r.prompt = tokens(60, 1);
    r.max_new_tokens = 30;
    r.ignore_eos = true;
    const SeqId id = e.submit(r);
    const KvCacheManager& kv = *e.paged_kv();
    int checked = 0;
    while (e.step()) {
      e.validate_kv();
      if (!kv.has_seq(id)) break;
      const int32_t len = kv.token_holes().cache_rows(id);
      std::vector<int32_t> live;
      for (int32_t row = 0; row < len; ++row)
        if (const int64_t s = kv.token_holes().row_slot(id, row);
            s >= 0 && !kv.token_holes().hole_mask()[static_cast<size_t>(s)])
          live.push_back(row);
      QCOMPARE(static_cast<int32_t>(live.size()), std::min(24, kv.seq_len(id)));
      if (kv.seq_len(id) <= 24) continue;
      for (int32_t s = 0; s < 2; ++s) QVERIFY(std::count(live.begin(), live.end(), s) == 1);                  // sinks
      for (int32_t row = len - 6; row < len; ++row) QVERIFY(std::count(live.begin(), live.end(), row) == 1);  // recent
      ++checked;  // which heavy hitters: h2o_evicts_exactly_the_lowest_accumulated
    }
    QVERIFY(checked > 50);
    const auto snap = e.snapshot();
    // Positions 0..88 are computed (the 30th new token never is); after each of 24..87 the
    // sequence is cut back to 24 (after 88 it has finished): 88 - 24 evictions.
    QCOMPARE(snap->eviction.tokens_evicted, uint64_t{88 - 24});
    QVERIFY(snap->eviction.compactions > 0);
    QVERIFY(snap->eviction.bytes_copied ==
            static_cast<int64_t>(snap->eviction.rows_moved) * e.backend().kv_bytes_per_token());
    const nlohmann::json j = to_json(*snap);
    QCOMPARE(j["eviction"]["tokens_evicted"].get<uint64_t>(), uint64_t{88 - 24});
    QCOMPARE(j["eviction"]["policy"].get<std::string>(), std::string("h2o:24:6"));
    // Finished: no block is held, so no holes are left "now" (a freed block keeps its old hole
    // count until it is taken again; that count is not a hole of the cache).
    QCOMPARE(snap->memory.blocks_used, 0);
    QCOMPARE(snap->eviction.holes, int64_t{0});
  }

  // The same selection checked against its definition: one step of eviction on a state whose
  // weights we read first.
  void h2o_evicts_exactly_the_lowest_accumulated() {
    const auto m = synthetic(5);
    Driven dr(m, 8, 32);
    dr.toks = tokens(40, 2);
    dr.feed(0, 40, /*record=*/true);
    const auto mass = dr.be.attention_mass();
    std::vector<std::pair<float, int32_t>> cand;  // rows that may go: not sinks (2), not recent (6)
    for (int32_t row = 2; row < 40 - 6; ++row)
      cand.push_back({mass[static_cast<size_t>(dr.kv.token_holes().row_slot(1, row))], row});
    std::sort(cand.begin(), cand.end());
    EvictConfig cfg = parse_evict("h2o:20:6");
    cfg.compact_at = 1.0;  // keep the holes where they are, to compare them
    TokenEvictor ev(cfg, 0, 2, dr.kv, dr.be);
    Sequence s;
    s.id = 1;
    s.set_prompt(dr.toks);
    s.num_computed = 40;
    SchedulerOutput out;
    out.chunks.push_back(ScheduledChunk{&s, 39, 1, true});
    ev.after_step(out);
    std::set<int32_t> evicted;
    for (int32_t row = 0; row < dr.kv.token_holes().cache_rows(1); ++row)
      if (const int64_t sl = dr.kv.token_holes().row_slot(1, row);
          sl < 0 || dr.kv.token_holes().hole_mask()[static_cast<size_t>(sl)])
        evicted.insert(row);
    QCOMPARE(dr.kv.token_eviction_counters().compactions, uint64_t{0});
    std::set<int32_t> want;  // 40 live, budget 20: the 20 lowest of the 32 candidates go
    for (int32_t i = 0; i < 20; ++i) want.insert(cand[static_cast<size_t>(i)].second);
    QCOMPARE(evicted, want);
  }

  void fully_evicted_block_returns_to_the_pool() {
    KvCacheConfig c;
    c.block_size = 4;
    c.num_blocks = 8;
    c.token_eviction = true;
    c.prefix_caching = true;
    KvCacheManager kv(c);
    const auto t = tokens(14, 3);
    QVERIFY(kv.allocate_slots(7, t, 14));
    const int32_t free_before = kv.pool().num_free();
    const BlockId b1 = kv.block_table(7)[1];
    QVERIFY(kv.pool().state(b1).hashed);
    const std::vector<int32_t> rows = {4, 5, 6};
    auto r = kv.token_holes().punch_rows(7, rows);
    QCOMPARE(r.blocks_freed, 0);
    QCOMPARE(kv.pool().state(b1).holes, 3);
    QVERIFY(!kv.pool().state(b1).hashed);  // holes: out of the prefix cache (and its descendants)
    QVERIFY(!kv.pool().state(kv.block_table(7)[2]).hashed);
    kv.validate();
    const std::vector<int32_t> last = {7};
    r = kv.token_holes().punch_rows(7, last);
    QCOMPARE(r.blocks_freed, 1);
    QCOMPARE(kv.block_table(7)[1], kNoBlock);
    QCOMPARE(kv.pool().num_free(), free_before + 1);
    QCOMPARE(kv.pool().state(b1).ref_count, 0);
    kv.validate();
    // Compaction: the freed block's table entry goes, rows 8..13 become rows 4..9 without a
    // copy (they stay in their blocks).
    QCOMPARE(kv.token_holes().compact(7), 0);
    QCOMPARE(kv.token_holes().cache_rows(7), 10);
    QCOMPARE(kv.seq_len(7), 14);  // positions are unchanged
    QCOMPARE(kv.token_holes().cache_row(7, 13), 9);
    QCOMPARE(kv.blocks_held(7), 3);
    QVERIFY(kv.token_holes().take_pending_slot_copies().empty());
    kv.validate();
    // A hole at row 1: rows 2..9 each move down one slot, in order (8 copies); 9 rows still
    // need 3 blocks.
    const std::vector<int32_t> one = {1};
    kv.token_holes().punch_rows(7, one);
    QCOMPARE(kv.token_holes().compact(7), 8);
    QCOMPARE(kv.token_holes().cache_rows(7), 9);
    QCOMPARE(kv.blocks_held(7), 3);
    const auto copies = kv.token_holes().take_pending_slot_copies();
    QCOMPARE(copies.size(), size_t{8});
    for (size_t i = 0; i < copies.size(); ++i)
      QCOMPARE(copies[i].dst + 1 == copies[i].src || copies[i].dst % 4 == 3, true);
    QCOMPARE(kv.token_eviction_counters().rows_moved, uint64_t{8});
    QCOMPARE(kv.pool().num_free(), free_before + 1);
    kv.validate();
  }

  // The same forward before and after a compaction: the survivors are read in the same order,
  // in the same chunks, so the logits are bit-identical (one thread: no split-KV).
  void compaction_preserves_logits_exactly() {
    const auto m = synthetic(6);
    Driven dr(m, 8, 24);
    dr.toks = tokens(61, 4);
    dr.feed(0, 60);
    std::vector<int32_t> rows;
    for (int32_t row = 3; row < 55; ++row)
      if (row % 3 != 0 || (row >= 16 && row < 24)) rows.push_back(row);
    dr.kv.token_holes().punch_rows(1, rows);
    const int32_t held_before = dr.kv.blocks_held(1);
    const std::vector<float> before = dr.feed(60, 61);
    // Recompute the same last token after compaction: it goes to its new row.
    dr.kv.token_holes().compact(1);
    dr.be.copy_slots(dr.kv.token_holes().take_pending_slot_copies());
    dr.kv.validate();
    QVERIFY(dr.kv.blocks_held(1) < held_before);
    QCOMPARE(dr.kv.token_holes().seq_holes(1), 0);
    QVERIFY(dr.kv.token_holes().cache_row(1, 60) < 60);
    // Re-feed position 60 at its new row (the table now ends at it).
    const std::vector<float> after = dr.compute(60, 61);
    QVERIFY(before == after);
  }

  // Blocks another holder still reads (a fork's shared blocks, prefix-cache hits) are never
  // holed, freed or moved.
  void eviction_never_frees_a_referenced_block() {
    KvCacheConfig c;
    c.block_size = 4;
    c.num_blocks = 16;
    c.token_eviction = true;
    KvCacheManager kv(c);
    const auto t = tokens(12, 5);
    QVERIFY(kv.allocate_slots(1, t, 12));
    kv.fork(1, 2);
    for (int32_t row = 0; row < 12; ++row) QVERIFY(!kv.token_holes().row_punchable(1, row));
    const std::vector<int32_t> rows = {5};
    QVERIFY_THROWS_EXCEPTION(std::logic_error, kv.token_holes().punch_rows(1, rows));
    QCOMPARE(kv.token_holes().compact(1), 0);
    // A prefix-cache hit: seq 3 attaches seq 1's first two blocks; those stay, its own go.
    const auto hit = kv.attach_cached_prefix(3, t);
    QCOMPARE(hit, 8);
    QVERIFY(kv.allocate_slots(3, t, 4));
    QVERIFY(!kv.token_holes().row_punchable(3, 0) && !kv.token_holes().row_punchable(3, 7));
    QVERIFY(kv.token_holes().row_punchable(3, 8));
    kv.free(1);
    kv.free(2);
    QVERIFY(kv.token_holes().row_punchable(
        3, 0));  // seq 3 alone holds them now: private, so evictable (and un-hashed if so)
    kv.validate();
    // The engine: two requests sharing a prompt with prefix caching, H2O on; every step valid.
    const auto m = synthetic(7);
    EngineConfig ec;
    ec.block_size = 8;
    ec.num_blocks = 48;
    ec.evict = parse_evict("h2o:16");
    Engine e(m, std::make_unique<CpuBackend>(m, 1), ec);
    Request r;
    r.prompt = tokens(40, 6);
    r.max_new_tokens = 20;
    r.ignore_eos = true;
    e.submit(r);
    e.submit(r);
    while (e.step()) e.validate_kv();
    QVERIFY(e.snapshot()->eviction.tokens_evicted > 0);
  }

  void validation_refuses_bad_settings() {
    const auto m = synthetic(8);
    auto problem = [&](EngineConfig c) { return describe_problems(blocking_problems(validate(c, m->config))); };
    EngineConfig c;
    c.evict = parse_evict("h2o:0");
    QVERIFY(problem(c).find("at least 1 token") != std::string::npos);
    c.evict = parse_evict("h2o:100000");
    QVERIFY(problem(c).find("larger than the context") != std::string::npos);
    c.evict = parse_evict("h2o:20%");
    QVERIFY(problem(c).empty());
    c.evict = parse_evict("h2o:16");
    c.sinks = 4;
    c.window = 12;
    QVERIFY(problem(c).find("must be smaller than the eviction budget") != std::string::npos);
    c.window = 0;
    c.sinks = 2;
    QVERIFY(problem(c).empty());  // sinks without a window: fine with eviction
    c.kv_dtype = KvDtype::KIVI4;
    QVERIFY(problem(c).find("single slots of kivi4 blocks") != std::string::npos);
    c.kv_dtype = KvDtype::ROT4C;  // centered per block: a moved slot would keep another block's center
    QVERIFY(problem(c).find("single slots of rot4c blocks") != std::string::npos);
    c.kv_dtype = KvDtype::F32;
    c.contiguous_baseline = true;
    QVERIFY(problem(c).find("paged cache") != std::string::npos);
    c.contiguous_baseline = false;
    c.hybrid_kv = HybridKvMode::On;
    QVERIFY(problem(c).find("hybrid-kv off") != std::string::npos);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_evict("lru:10"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_evict("h2o"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_evict("h2o:ten"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_evict("h2o:150%"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_evict("snapkv:0%"));
    QCOMPARE(describe_evict(parse_evict("snapkv:12.5%:16")), std::string("snapkv:12.5%:16"));
    // A backend without eviction support (CUDA) is refused at engine construction.
    struct NoEvictBackend : CpuBackend {
      using CpuBackend::CpuBackend;
      bool supports_token_eviction() const override { return false; }
      std::string name() const override { return "cuda-like"; }
    };
    EngineConfig ok;
    ok.evict = parse_evict("h2o:64");
    try {
      Engine e(m, std::make_unique<NoEvictBackend>(m, 1), ok);
      QFAIL("a backend without token eviction was accepted");
    } catch (const std::invalid_argument& ex) {
      QVERIFY(std::string(ex.what()).find("does not support token eviction") != std::string::npos);
    }
  }

  // SnapKV chooses once, when the prompt is in, and keeps budget tokens of it; generation then
  // appends without evicting.
  void snapkv_selects_once_after_the_prompt() {
    const auto m = synthetic(9);
    EngineConfig ec;
    ec.block_size = 8;
    ec.num_blocks = 64;
    ec.prefix_caching = false;
    ec.evict = parse_evict("snapkv:25%:8");
    ec.sched.max_batched_tokens = 16;
    Engine e(m, std::make_unique<CpuBackend>(m, 1), ec);
    Request r;
    r.prompt = tokens(80, 7);
    r.max_new_tokens = 10;
    r.ignore_eos = true;
    const SeqId id = e.submit(r);
    uint64_t evicted_at_prompt = 0;
    while (e.step()) {
      e.validate_kv();
      const auto snap = e.snapshot();
      if (e.sequence(id).num_computed == 80) evicted_at_prompt = snap->eviction.tokens_evicted;
      if (e.sequence(id).num_computed < 80) QCOMPARE(snap->eviction.tokens_evicted, uint64_t{0});
    }
    QCOMPARE(evicted_at_prompt, uint64_t{80 - 20});
    QCOMPARE(e.snapshot()->eviction.tokens_evicted, uint64_t{80 - 20});
  }
};

QTEST_APPLESS_MAIN(TestEvict)
#include "test_evict.moc"
