// A hybrid model's recurrent state on the paged engine (lfm2: short convolutions beside
// attention). Each running sequence holds a state slot beside its KV blocks; held to the
// reference forward, and exact under everything that cuts the work differently: chunk sizes
// 1, 7 and 64 on a 210-token prompt give the same logits; a preempted sequence resumes with a
// fresh state and recomputes to the same logits; n = 2 forks copy the parent's state. The slot
// manager itself: admission waits for a free slot, preemption and finish give it back.
#include <QtTest>

#include <cmath>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "kv/kv_cache_manager.h"
#include "kv/state_slot_manager.h"
#include "model/synthetic_model.h"
#include "paged_harness.h"
#include "reference_forward.h"
#include "test_support.h"

using namespace kvscope;

namespace {

// 6 layers: 0, 1, 3, 4 short convolutions, 2 and 5 attention (4 heads of 16, 2 KV heads).
std::shared_ptr<Model> lfm2(GgmlType dtype = GgmlType::F32) {
  SyntheticSpec s;
  s.dtype = dtype;
  s.arch = "lfm2";
  s.n_vocab = 300;
  s.n_embd = 64;
  s.n_layer = 6;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 128;
  s.n_ctx = 1024;
  s.swa_pattern = 3;
  s.seed = 17;
  const auto path =
      test::tmp_dir() / (dtype == GgmlType::F32 ? "recurrent-state-lfm2.gguf" : "recurrent-state-lfm2-q8.gguf");
  write_synthetic_model(s, path.string());
  return Model::load(path.string());
}

std::vector<TokenId> tokens(int32_t n, int32_t offset) { return test::token_ids(n, offset); }

struct Out {
  std::vector<std::vector<TokenId>> seqs;
  std::vector<std::vector<std::vector<float>>> logits;
  int32_t preemptions = 0;
};

Out run(const std::shared_ptr<Model>& m, const EngineConfig& cfg, const std::vector<std::vector<TokenId>>& prompts,
        int32_t n_new = 8) {
  Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
  std::vector<SeqId> ids;
  for (const auto& p : prompts) {
    Request r;
    r.prompt = p;
    r.max_new_tokens = n_new;
    r.ignore_eos = true;
    r.record_logits = true;
    ids.push_back(e.submit(r));
  }
  e.run_until_idle();
  Out o;
  for (SeqId id : ids) {
    if (!e.sequence(id).error.empty()) throw std::runtime_error(e.sequence(id).error);
    o.seqs.push_back(e.sequence(id).tokens);
    o.logits.push_back(e.recorded_logits(id));
    o.preemptions += e.sequence(id).preemptions;
  }
  return o;
}

float max_diff(const Out& a, const Out& b) {
  float d = 0;
  for (size_t r = 0; r < a.logits.size(); ++r)
    for (size_t s = 0; s < std::min(a.logits[r].size(), b.logits[r].size()); ++s)
      d = std::max(d, test::max_abs_diff(a.logits[r][s], b.logits[r][s].data(), a.logits[r][s].size()));
  return d;
}

EngineConfig base() {
  EngineConfig c;
  c.num_blocks = 128;
  c.block_size = 8;
  return c;
}

}  // namespace

class TestRecurrentState : public QObject {
  Q_OBJECT
 private slots:
  void layers_and_memory() {
    const auto m = lfm2();
    const ModelConfig& c = m->config;
    QVERIFY(c.layer_is_recurrent(0) && c.layer_is_recurrent(4) && !c.layer_is_recurrent(2));
    QCOMPARE(c.conv_l_cache, 3);
    QCOMPARE(c.kv_elements_per_token(), int64_t{2 * 2 * 2 * 16});  // 2 attention layers
    QCOMPARE(c.state_floats_per_seq(), int64_t{4 * 2 * 64});       // 4 conv layers x 2 past inputs
    EngineConfig cfg = base();
    cfg.sched.max_running = 4;
    Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
    QVERIFY2(!e.config().prefix_caching, "prefix caching stays on without state checkpoints");
    QCOMPARE(e.backend().state_bytes_per_slot(), int64_t{4 * 2 * 64 * 4});
    QVERIFY2(e.kv_summary().find("recurrent state: 12 slots") != std::string::npos, e.kv_summary().c_str());
  }

  void engine_matches_reference() {
    const auto m = lfm2();
    const Out got = run(m, base(), {tokens(40, 0), tokens(23, 3)});
    float worst = 0;
    for (size_t r = 0; r < got.seqs.size(); ++r) {
      test::ReferenceForward ref(m);
      const auto& toks = got.seqs[r];
      const size_t prompt = toks.size() - got.logits[r].size();
      for (size_t i = 0; i + 1 < toks.size(); ++i) {
        const auto want = ref.step(toks[i]);
        if (i + 1 >= prompt)
          worst = std::max(worst, test::max_abs_diff(got.logits[r][i + 1 - prompt], want.data(), want.size()));
      }
    }
    qInfo("lfm2 engine vs reference forward: max |dlogit| %.2e", static_cast<double>(worst));
    QVERIFY(worst < 1e-3f);
  }

  // The state carries across chunks: chunk sizes 1, 7 and 64 on a 210-token prompt agree. With
  // Q8_0 weights every matmul kernel (one token or many) returns the same bits, so the runs are
  // bit-identical; with f32 weights the float GEMM (chunks) and GEMV (one token) sum in
  // different orders, which moves logits by about 1e-5 (9e-6 in the native tree, 1.4e-5 in the
  // sanitizer tree), none of it from the convolution's state (chunk 7 vs 64: 0).
  void chunked_prefill_is_exact_data() {
    QTest::addColumn<int>("dtype");
    QTest::newRow("q8_0") << int(GgmlType::Q8_0);
    QTest::newRow("f32") << int(GgmlType::F32);
  }
  void chunked_prefill_is_exact() {
    QFETCH(int, dtype);
    const auto m = lfm2(static_cast<GgmlType>(dtype));
    std::vector<Out> outs;
    for (int32_t chunk : {64, 7, 1}) {
      EngineConfig cfg = base();
      cfg.sched.max_batched_tokens = chunk;
      outs.push_back(run(m, cfg, {tokens(210, 1)}));
    }
    const float d7 = max_diff(outs[1], outs[0]), d1 = max_diff(outs[2], outs[0]);
    qInfo("lfm2 chunked prefill: chunk 7 vs 64 %.2e, chunk 1 vs 64 %.2e", static_cast<double>(d7),
          static_cast<double>(d1));
    if (dtype == int(GgmlType::Q8_0)) {
      QCOMPARE(d7, 0.0f);
      QCOMPARE(d1, 0.0f);
    } else {
      QVERIFY(d7 < 1e-5f && d1 < 3e-5f);
    }
    QVERIFY(outs[1].seqs == outs[0].seqs && outs[2].seqs == outs[0].seqs);
  }

  // A pool that cannot hold both sequences to the end preempts one; it resumes with a fresh
  // state and recomputes to the same logits as the unhurried run.
  void preemption_resumes_exactly() {
    const auto m = lfm2();
    const std::vector<std::vector<TokenId>> prompts = {tokens(30, 2), tokens(30, 5)};
    const Out plain = run(m, base(), prompts, 12);
    EngineConfig tight = base();
    tight.num_blocks = 9;  // 5 blocks each at the end (42 tokens): one waits or is preempted
    const Out got = run(m, tight, prompts, 12);
    qInfo("lfm2 tight pool: %d preemptions, max |dlogit| vs plain %.2e", got.preemptions,
          static_cast<double>(max_diff(got, plain)));
    QVERIFY(got.preemptions > 0);
    QVERIFY(max_diff(got, plain) < 1e-4f);
    QVERIFY(got.seqs == plain.seqs);
  }

  // n = 2: the second sample starts from a copy of the first's state after the prompt.
  void forks_copy_the_state() {
    const auto m = lfm2();
    Engine e(m, std::make_unique<CpuBackend>(m, 2), base());
    Request r;
    r.prompt = tokens(25, 4);
    r.max_new_tokens = 6;
    r.ignore_eos = true;
    r.record_logits = true;
    const std::vector<SeqId> ids = e.submit_parallel(r, 2);
    e.run_until_idle();
    QCOMPARE(ids.size(), size_t{2});
    // Greedy: both samples see the same tokens, so every step's logits agree.
    QCOMPARE(e.sequence(ids[0]).tokens, e.sequence(ids[1]).tokens);
    const Out single = run(m, base(), {tokens(25, 4)}, 6);
    QCOMPARE(e.sequence(ids[1]).tokens, single.seqs[0]);
  }

  void state_slots_gate_admission() {
    KvCacheConfig kc;
    kc.block_size = 8;
    kc.num_blocks = 64;
    StateSlotManager s(std::make_unique<KvCacheManager>(kc), 2);
    const std::vector<TokenId> p = tokens(10, 0);
    for (SeqId id : {1, 2}) {
      QVERIFY(s.can_admit(p, 10, 10));
      QCOMPARE(s.attach_cached_prefix(id, p), 0);
      QVERIFY(s.allocate_slots(id, p, 10));
      QVERIFY(s.state_slot(id) >= 0);
    }
    QVERIFY2(!s.can_admit(p, 10, 10), "a third sequence admitted with no state slot left");
    QVERIFY_THROWS_EXCEPTION(std::length_error, s.fork(1, 3));
    s.free(1);  // finished or preempted: its slot comes back
    QCOMPARE(s.state_slot(1), -1);
    QVERIFY(s.can_admit(p, 10, 10));
    s.fork(2, 4);
    const auto copies = s.take_state_copies();
    QCOMPARE(copies.size(), size_t{1});
    QCOMPARE(copies[0].src, s.state_slot(2));
    QCOMPARE(copies[0].dst, s.state_slot(4));
    s.validate();
  }

  // Every KV dtype on the attention layers; f16 and bf16 stay near f32 on the prompt's step.
  void every_kv_dtype_runs() {
    const auto m = lfm2();
    const Out f32 = run(m, base(), {tokens(40, 6)});
    for (KvDtype d : kAllKvDtypes) {
      EngineConfig cfg = base();
      cfg.kv_dtype = d;
      const Out got = run(m, cfg, {tokens(40, 6)});
      for (const auto& row : got.logits[0])
        for (float x : row) QVERIFY2(std::isfinite(x), kv_dtype_name(d));
      const float first = test::max_abs_diff(got.logits[0][0], f32.logits[0][0].data(), f32.logits[0][0].size());
      if (d == KvDtype::F16 || d == KvDtype::BF16) QVERIFY2(first < 0.1f, kv_dtype_name(d));
    }
  }

  // A window with StreamingLLM sinks on the attention layers; the convolutions are untouched.
  void window_and_sinks_match_reference() {
    const auto m = lfm2();
    EngineConfig cfg = base();
    cfg.window = 12;
    cfg.sinks = 2;
    const Out got = run(m, cfg, {tokens(50, 7)});
    test::ReferenceForward ref(m, 12, 2, test::RopeAt::CachePosition);
    const auto& toks = got.seqs[0];
    const size_t prompt = toks.size() - got.logits[0].size();
    float worst = 0;
    for (size_t i = 0; i + 1 < toks.size(); ++i) {
      const auto want = ref.step(toks[i]);
      if (i + 1 >= prompt)
        worst = std::max(worst, test::max_abs_diff(got.logits[0][i + 1 - prompt], want.data(), want.size()));
    }
    qInfo("lfm2 window 12 + 2 sinks vs reference: %.2e", static_cast<double>(worst));
    QVERIFY(worst < 1e-3f);
  }

  void eviction_is_refused() {
    const auto m = lfm2();
    EngineConfig cfg = base();
    cfg.evict = parse_evict("h2o:16");
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, Engine(m, std::make_unique<CpuBackend>(m, 2), cfg));
  }
};

QTEST_GUILESS_MAIN(TestRecurrentState)
#include "test_recurrent_state.moc"
