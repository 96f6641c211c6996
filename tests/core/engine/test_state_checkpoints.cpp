// Prefix caching on hybrid recurrent models (kv/state_checkpoint_pool.h): a hit restores the
// recurrent state from a checkpoint at a block boundary and recomputes the rest, so it must give
// what a run without the prefix cache gives, for every architecture, policy and state dtype;
// hits end at the last checkpoint the policy left; a full pool evicts its least recently used
// checkpoint, and a prompt whose checkpoints were evicted recomputes from the start.
#include <QtTest>

#include "engine/request_story_log.h"
#include "hybrid_models.h"
#include "kv/state_checkpoint_pool.h"
#include "kv/state_slot_manager.h"

using namespace kvscope;
using namespace kvscope::test;

namespace {

EngineConfig base(const std::string& policy) {
  EngineConfig c;
  c.num_blocks = 128;
  c.block_size = 8;
  std::string why;
  if (!parse_checkpoint_policy(policy, c.state_checkpoints, why)) throw std::invalid_argument(why);
  return c;
}

// The prompts one after another on one engine (each sees the checkpoints the earlier ones left).
struct Turns {
  Out out;
  std::vector<int32_t> cached;  // prompt tokens each request took from the prefix cache
  CheckpointCounters counters;
};

Turns run_in_turn(const std::shared_ptr<Model>& m, const EngineConfig& cfg,
                  const std::vector<std::vector<TokenId>>& prompts, int32_t n_new = 8) {
  Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
  Turns t;
  for (const auto& p : prompts) {
    const SeqId id = e.submit(logged_request(p, n_new));
    e.run_until_idle();
    if (!e.sequence(id).error.empty()) throw std::runtime_error(e.sequence(id).error);
    t.out.seqs.push_back(e.sequence(id).tokens);
    t.out.logits.push_back(e.recorded_logits(id));
    t.cached.push_back(e.sequence(id).num_cached_prompt);
    e.validate_kv();
  }
  if (e.state_slots()) t.counters = e.state_slots()->checkpoints().counters();
  return t;
}

// A hit restores the very bits the state had, but the tokens after it run in a shorter chunk,
// and the GEMM rounds a row an ulp apart from the GEMV or another chunk's tiling; a 16-bit
// state rounds such an ulp into a whole f16 step. With every matmul on vec-dot kernels
// (ctest state_checkpoints_vec_dot) a hit and no hit agree to the bit.
float tolerance(StateDtype d) {
  if (qEnvironmentVariable("KVSCOPE_GEMM") == "off" && qEnvironmentVariable("KVSCOPE_GEMV") == "off") return 0.0f;
  return d == StateDtype::F32 ? 2e-5f : 1e-3f;
}

std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

class TestStateCheckpoints : public QObject {
  Q_OBJECT

 private slots:
  void policy_names() {
    CheckpointPolicy p;
    std::string why;
    for (const char* ok : {"off", "prompt-end", "every-block", "every:1", "every:16"}) {
      QVERIFY2(parse_checkpoint_policy(ok, p, why), ok);
      if (std::string(ok) != "every-block") QCOMPARE(checkpoint_policy_name(p), std::string(ok));
    }
    for (const char* bad : {"", "every:0", "every:-2", "every:", "every:3x", "always"}) {
      QVERIFY2(!parse_checkpoint_policy(bad, p, why), bad);
      QVERIFY(why.find("every:N") != std::string::npos);
    }
  }

  // The pool alone: pending checkpoints are invisible and never evicted, ready ones leave in
  // least-recently-used order, lookups compare tokens exactly.
  void pool_lru_and_pending() {
    StateCheckpointPool pool(10, 2, 4);
    const auto a = tokens(8, 1), b = tokens(8, 2), c = tokens(8, 3);
    const int32_t sa = pool.reserve(a, 1);
    QVERIFY(sa >= 10 && sa < 12);
    QCOMPARE(pool.longest(a, 8).slot, -1);  // not written yet
    QCOMPARE(pool.reserve(a, 2), -1);       // already on its way
    const int32_t sb = pool.reserve(b, 2);
    QCOMPARE(pool.reserve(c, 3), -1);  // both pending: nothing to evict
    pool.commit();
    QCOMPARE(pool.longest(a, 8).slot, sa);
    QCOMPARE(pool.longest(a, 8).len, 8);
    QCOMPARE(pool.longest(a, 7).len, 4 * 0);  // no checkpoint at 4
    pool.mark_restored(sa);                   // a used more recently than b
    const int32_t sc = pool.reserve(c, 3);
    QCOMPARE(sc, sb);  // b was the least recently used
    QCOMPARE(pool.counters().evicted, uint64_t{1});
    pool.drop_pending(3);
    QCOMPARE(pool.longest(c, 8).slot, -1);
    QCOMPARE(pool.longest(b, 8).slot, -1);
    auto a2 = a;
    a2[5] += 1;  // same first block, other second block
    QCOMPARE(pool.longest(a2, 8).len, 0);
    pool.validate();
  }

  // Shared checkpoints (a branch point, or restored once) outlive a request's own saves: those
  // evict each other first, and a shared one only while shared ones hold over 3/4 of the pool.
  void pool_keeps_shared_checkpoints() {
    StateCheckpointPool pool(10, 2, 4);
    const auto shared = tokens(8, 1);
    const int32_t ss = pool.reserve(shared, 1, true);
    pool.commit();
    for (int32_t k = 2; k < 6; ++k) {  // a long prompt's own boundaries, one per step
      QVERIFY(pool.reserve(tokens(8, k), 1) >= 0);
      pool.commit();
    }
    QCOMPARE(pool.longest(shared, 8).slot, ss);
    QCOMPARE(pool.counters().evicted, uint64_t{3});
    QCOMPARE(pool.longest(tokens(8, 5), 8).len, 8);  // the newest own save is there too
    // A second shared prefix takes the unshared slot; then both are shared (2 of 2 > 3/4), so
    // an unshared save may evict the least recently used of them.
    const auto other = tokens(8, 9);
    QVERIFY(pool.reserve(other, 2, true) >= 0);
    pool.commit();
    pool.mark_restored(ss);  // `shared` used more recently
    QCOMPARE(pool.reserve(tokens(8, 10), 3), pool.longest(other, 8).slot);
    pool.commit();
    QCOMPARE(pool.longest(shared, 8).slot, ss);
    QCOMPARE(pool.longest(other, 8).len, 0);
    pool.validate();

    // Four slots, three shared: an unshared save only cycles through the fourth.
    StateCheckpointPool big(10, 4, 4);
    for (int32_t k = 0; k < 3; ++k) QVERIFY(big.reserve(tokens(8, 20 + k), 1, true) >= 0);
    big.commit();
    for (int32_t k = 0; k < 5; ++k) {
      QVERIFY(big.reserve(tokens(8, 30 + k), 2) >= 0);
      big.commit();
    }
    for (int32_t k = 0; k < 3; ++k) QCOMPARE(big.longest(tokens(8, 20 + k), 8).len, 8);
    QCOMPARE(big.counters().evicted, uint64_t{4});
    big.validate();
  }

  void prefix_hit_matches_no_hit_data() {
    QTest::addColumn<QString>("arch");
    QTest::addColumn<QString>("policy");
    QTest::addColumn<int>("state_dtype");
    QTest::addColumn<int>("hit_b");  // prompt tokens B takes from the cache (A takes 48 on its rerun)
    for (const char* arch : {"lfm2", "qwen35", "granitehybrid"}) {
      QTest::newRow((std::string(arch) + " every-block").c_str()) << arch << "every-block" << 0 << 40;
      QTest::newRow((std::string(arch) + " every:2").c_str()) << arch << "every:2" << 0 << 32;
      QTest::newRow((std::string(arch) + " prompt-end").c_str()) << arch << "prompt-end" << 0 << 0;
    }
    QTest::newRow("qwen35 every-block f16") << "qwen35"
                                            << "every-block" << int(StateDtype::F16) << 40;
    QTest::newRow("granitehybrid every:2 bf16") << "granitehybrid"
                                                << "every:2" << int(StateDtype::BF16) << 32;
  }
  // A (50 tokens), then B sharing its first 40, then A again, against the same three without
  // the prefix cache: same tokens, same logits.
  void prefix_hit_matches_no_hit() {
    QFETCH(QString, arch);
    QFETCH(QString, policy);
    QFETCH(int, state_dtype);
    QFETCH(int, hit_b);
    const auto m = hybrid(arch.toStdString());
    const auto shared = tokens(40, 3);
    const auto a = concat(shared, tokens(10, 100)), b = concat(shared, tokens(13, 200));
    EngineConfig cfg = base(policy.toStdString());
    cfg.state_dtype = static_cast<StateDtype>(state_dtype);
    const Turns hit = run_in_turn(m, cfg, {a, b, a});
    cfg.prefix_caching = false;
    const Turns plain = run_in_turn(m, cfg, {a, b, a});
    QCOMPARE(plain.cached, std::vector<int32_t>({0, 0, 0}));
    QCOMPARE(hit.cached, std::vector<int32_t>({0, hit_b, 48}));
    const float diff = max_diff(hit.out, plain.out);
    qInfo("%s %s: hits %d and 48 tokens, %llu checkpoints saved, max |dlogit| vs no prefix cache %.2e",
          qPrintable(arch), qPrintable(policy), hit_b, static_cast<unsigned long long>(hit.counters.saved),
          static_cast<double>(diff));
    QVERIFY(diff <= tolerance(cfg.state_dtype));
    QCOMPARE(hit.out.seqs, plain.out.seqs);
    QCOMPARE(hit.counters.restored, uint64_t{hit_b > 0 ? 2u : 1u});
  }

  // B finds A's KV blocks for their shared 40 tokens but no state there: it checkpoints that
  // branch point whatever the policy, so C hits it, even with room for two checkpoints only.
  void branch_point_is_checkpointed_data() {
    QTest::addColumn<QString>("policy");
    QTest::addColumn<int>("n_checkpoints");
    QTest::newRow("prompt-end") << "prompt-end" << 64;
    QTest::newRow("every-block, 2 checkpoints") << "every-block" << 2;
  }
  void branch_point_is_checkpointed() {
    QFETCH(QString, policy);
    QFETCH(int, n_checkpoints);
    const auto m = lfm2();
    EngineConfig cfg = base(policy.toStdString());
    cfg.checkpoint_memory_bytes = n_checkpoints * m->config.state_floats_per_seq() * 4;
    const auto shared = tokens(40, 3);
    const std::vector<std::vector<TokenId>> prompts = {concat(shared, tokens(30, 100)), concat(shared, tokens(27, 200)),
                                                       concat(shared, tokens(25, 300))};
    const Turns got = run_in_turn(m, cfg, prompts);
    QCOMPARE(got.cached, std::vector<int32_t>({0, 0, 40}));
    cfg.prefix_caching = false;
    QVERIFY(max_diff(got.out, run_in_turn(m, cfg, prompts).out) <= tolerance(StateDtype::F32));
  }

  // The request's story says the state, not the KV cache, ended B's hit.
  void story_names_the_missing_checkpoint() {
    const auto m = lfm2();
    Engine e(m, std::make_unique<CpuBackend>(m, 2), base("prompt-end"));
    const auto shared = tokens(40, 3);
    for (const auto& p : {concat(shared, tokens(30, 100)), concat(shared, tokens(27, 200))}) {
      e.submit(logged_request(p, 2));
      e.run_until_idle();
    }
    const RequestStory* b = e.stories().find(2, e.story_engine());
    QVERIFY(b && !b->admissions.empty());
    const PrefixLookup& l = b->admissions.front().lookup;
    QCOMPARE(l.hit_tokens, 0);
    QCOMPARE(l.miss.reason, MissReason::NoStateCheckpoint);
    QCOMPARE(l.miss.block_index, 0);
  }

  // Room for two checkpoints: P2's evict P1's, so P1's rerun finds its KV blocks but no state
  // and recomputes from the start; its next rerun hits the checkpoints that rerun left.
  void checkpoint_eviction() {
    const auto m = lfm2();
    EngineConfig cfg = base("every-block");
    cfg.checkpoint_memory_bytes = 2 * m->config.state_floats_per_seq() * 4;
    const auto p1 = tokens(40, 1), p2 = tokens(40, 2);
    const Turns got = run_in_turn(m, cfg, {p1, p2, p1, p1}, 2);
    EngineConfig off = cfg;
    off.prefix_caching = false;
    const Turns plain = run_in_turn(m, off, {p1, p2, p1, p1}, 2);
    QCOMPARE(got.cached, std::vector<int32_t>({0, 0, 0, 32}));
    QCOMPARE(got.counters.saved, uint64_t{6});    // the two furthest boundaries of each prefill
    QCOMPARE(got.counters.evicted, uint64_t{4});  // P1's by P2's, P2's by P1's rerun
    QCOMPARE(got.counters.restored, uint64_t{1});
    QVERIFY(max_diff(got.out, plain.out) <= tolerance(StateDtype::F32));
    QCOMPARE(got.out.seqs, plain.out.seqs);
  }

  // Preempted sequences come back through the prefix cache too: whatever they find, they
  // finish as an unpreempted run does.
  void preemption_with_checkpoints() {
    const auto m = hybrid("qwen35");
    const std::vector<std::vector<TokenId>> prompts = {tokens(30, 2), tokens(30, 5)};
    const Out plain = run(m, base("every-block"), prompts, 12);
    EngineConfig tight = base("every-block");
    tight.num_blocks = 9;
    const Out got = run(m, tight, prompts, 12);
    QVERIFY(got.preemptions > 0);
    QVERIFY(max_diff(got, plain) <= tolerance(StateDtype::F32));
    QCOMPARE(got.seqs, plain.seqs);
  }
};

QTEST_GUILESS_MAIN(TestStateCheckpoints)
#include "test_state_checkpoints.moc"
