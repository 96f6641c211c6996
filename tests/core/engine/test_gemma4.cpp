// gemma4 on the paged engine: sliding layers of one head shape and full layers of another in two
// block pools, the last layers reading an earlier layer's KV (no memory of their own), per-layer
// embeddings, V normed, the soft-capped logits. Each run is held to the plain reference forward
// (tests/support/reference_forward.h, which computes every piece from its definition in double)
// on the same tokens: prefix caching, chunked prefill, a tight pool (preemption) and a window
// with StreamingLLM sinks must not move a logit beyond summation order.
#include <QtTest>

#include <cmath>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/synthetic_model.h"
#include "paged_harness.h"
#include "reference_forward.h"
#include "test_support.h"

using namespace kvscope;

namespace {

// 6 layers: 0, 1, 3, 4 slide (head 16, 1 KV head), 2 and 5 are full (head 32, 2 KV heads);
// layers 3 and 4 read layer 1's KV, layer 5 reads layer 2's.
std::shared_ptr<Model> gemma4(bool k_eq_v = false) {
  SyntheticSpec s;
  s.arch = "gemma4";
  s.n_vocab = 300;
  s.n_embd = 64;
  s.n_layer = 6;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 32;
  s.head_dim_swa = 16;
  s.n_head_kv_swa = 1;
  s.n_kv_shared = 3;
  s.swa_pattern = 3;
  s.sliding_window = 12;
  s.n_embd_per_layer = 16;
  s.n_ff = 96;
  s.n_ctx = 512;
  s.final_softcap = 30.0f;
  s.rope_partial_full = 0.25f;
  s.rope_base = 1e6f;
  s.k_eq_v = k_eq_v;
  s.seed = 11;
  const auto path = test::tmp_dir() / (k_eq_v ? "gemma4-k-eq-v.gguf" : "gemma4.gguf");
  write_synthetic_model(s, path.string());
  return Model::load(path.string());
}

std::vector<TokenId> tokens(int32_t n, int32_t offset) { return test::token_ids(n, offset); }

struct Run {
  std::vector<std::vector<TokenId>> seqs;               // prompt + generated, per request
  std::vector<std::vector<std::vector<float>>> logits;  // per request, per generated token
  int32_t cached = 0, preemptions = 0;
};

// Three requests, the second sharing the first's 24-token beginning and running beside the
// third; 10 tokens each.
Run run(const std::shared_ptr<Model>& m, const EngineConfig& cfg) {
  Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
  std::vector<TokenId> a = tokens(30, 0), b(a.begin(), a.begin() + 24), c = tokens(20, 5);
  const auto more = tokens(7, 4);
  b.insert(b.end(), more.begin(), more.end());
  Run out;
  std::vector<SeqId> ids;
  for (const auto* p : {&a, &b, &c}) {
    Request r;
    r.prompt = *p;
    r.max_new_tokens = 10;
    r.ignore_eos = true;
    r.record_logits = true;
    ids.push_back(e.submit(r));
    if (p == &a) e.run_until_idle();
  }
  e.run_until_idle();
  for (SeqId id : ids) {
    const Sequence& s = e.sequence(id);
    if (!s.error.empty()) throw std::runtime_error(s.error);
    out.seqs.push_back(s.tokens);
    out.logits.push_back(e.recorded_logits(id));
    out.cached += s.num_cached_prompt;
    out.preemptions += s.preemptions;
  }
  return out;
}

// The reference forward on each request's tokens; the worst |logit difference| over every
// generated token.
float worst_vs_reference(const std::shared_ptr<Model>& m, const Run& got, int32_t window = 0, int32_t sinks = 0) {
  float worst = 0;
  for (size_t r = 0; r < got.seqs.size(); ++r) {
    test::ReferenceForward ref(m, window, sinks, sinks > 0 ? test::RopeAt::CachePosition : test::RopeAt::TextPosition);
    const std::vector<TokenId>& toks = got.seqs[r];
    const size_t n_gen = got.logits[r].size(), prompt = toks.size() - n_gen;
    for (size_t i = 0; i + 1 < toks.size(); ++i) {
      const std::vector<float> want = ref.step(toks[i]);
      if (i + 1 < prompt) continue;
      const std::vector<float>& row = got.logits[r][i + 1 - prompt];
      worst = std::max(worst, test::max_abs_diff(row, want.data(), want.size()));
    }
  }
  return worst;
}

}  // namespace

class TestGemma4 : public QObject {
  Q_OBJECT
 private slots:
  void layers_have_their_shapes_and_sources() {
    const auto m = gemma4();
    const ModelConfig& c = m->config;
    QCOMPARE(c.layer_head_dim(0), 16);
    QCOMPARE(c.layer_head_dim(2), 32);
    QCOMPARE(c.layer_n_head_kv(1), 1);
    QCOMPARE(c.layer_n_head_kv(5), 2);
    QCOMPARE(c.kv_source(3), 1);
    QCOMPARE(c.kv_source(4), 1);
    QCOMPARE(c.kv_source(5), 2);
    QCOMPARE(c.layer_n_ff(2), 96);
    QCOMPARE(c.layer_n_ff(3), 192);  // the borrowing layers' double-wide FFN
    QCOMPARE(c.attn_scale, 1.0f);
    // K and V of layers 0 and 1 (1 x 16 each) and of layer 2 (2 x 32): 2 x (16 + 16 + 64) floats.
    QCOMPARE(c.kv_elements_per_token(), int64_t{192});
  }

  // Two pools, one per kind, each with its own head shape; the borrowing layers add nothing.
  void two_pools_of_their_own_shapes() {
    const auto m = gemma4();
    EngineConfig cfg;
    cfg.num_blocks = 32;
    cfg.block_size = 8;
    Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
    const std::vector<KvLayout> g = e.backend().kv_group_layouts();
    QCOMPARE(g.size(), size_t{2});
    QCOMPARE(g[0].n_layer, 1);  // layer 2
    QCOMPARE(g[0].n_head_kv, 2);
    QCOMPARE(g[0].head_dim, 32);
    QCOMPARE(g[1].n_layer, 2);  // layers 0 and 1
    QCOMPARE(g[1].n_head_kv, 1);
    QCOMPARE(g[1].head_dim, 16);
    QCOMPARE(e.backend().kv_bytes_per_token(), int64_t{192 * 4});
  }

  void one_pool_is_refused_with_the_reason() {
    const auto m = gemma4();
    EngineConfig cfg;
    cfg.num_blocks = 32;
    cfg.hybrid_kv = HybridKvMode::Off;
    try {
      Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
      QFAIL("one pool accepted two head shapes");
    } catch (const std::invalid_argument& ex) {
      QVERIFY2(std::string(ex.what()).find("different shapes") != std::string::npos, ex.what());
    }
  }

  void engine_matches_reference_data() {
    QTest::addColumn<QString>("mode");
    for (const char* m : {"plain", "prefix cache", "chunked prefill", "tight pool", "k = v"}) QTest::newRow(m) << m;
  }
  void engine_matches_reference() {
    QFETCH(QString, mode);
    const auto m = gemma4(mode == "k = v");
    QVERIFY(m->weights.layers[2].v_from_k == (mode == "k = v"));
    EngineConfig cfg;
    cfg.num_blocks = 64;
    cfg.block_size = 8;
    cfg.prefix_caching = mode != "plain";
    if (mode == "chunked prefill") cfg.sched.max_batched_tokens = 7;
    // 7 full-layer blocks of 8: the second (6 blocks at its end) and third (4) requests are
    // admitted together and outgrow the pool, so one is preempted and resumed.
    if (mode == "tight pool") cfg.num_blocks = 7, cfg.sliding_num_blocks = 8;
    const Run got = run(m, cfg);
    const float d = worst_vs_reference(m, got);
    qInfo("gemma4 %s: max |dlogit| vs reference %.2e (%d prompt tokens cached, %d preemptions)", qPrintable(mode),
          static_cast<double>(d), got.cached, got.preemptions);
    QVERIFY(d < 1e-3f);
    if (mode == "prefix cache") QVERIFY(got.cached >= 24);
    if (mode == "tight pool") QVERIFY2(got.preemptions > 0, "the tight pool preempted nothing");
  }

  // Every KV dtype runs on both pools (the packed ones with a group that fits the 16-wide
  // sliding heads); f16 and bf16 stay near f32 on the prompt's step.
  void every_kv_dtype_runs() {
    const auto m = gemma4();
    EngineConfig base;
    base.num_blocks = 64;
    base.block_size = 8;
    const Run f32 = run(m, base);
    for (KvDtype d : kAllKvDtypes) {
      EngineConfig cfg = base;
      cfg.kv_dtype = d;
      const Run got = run(m, cfg);
      float first = 0;
      for (size_t r = 0; r < got.logits.size(); ++r) {
        for (const auto& row : got.logits[r])
          for (float x : row) QVERIFY2(std::isfinite(x), kv_dtype_name(d));
        first = std::max(first, test::max_abs_diff(got.logits[r][0], f32.logits[r][0].data(), f32.logits[r][0].size()));
      }
      qInfo("gemma4 %s: prompt step max |dlogit| vs f32 KV %.2e", kv_dtype_name(d), static_cast<double>(first));
      if (d == KvDtype::F16 || d == KvDtype::BF16) QVERIFY2(first < 0.1f, kv_dtype_name(d));
    }
  }

  // StreamingLLM's window and sink tokens on top of the model's own sliding layers; the
  // borrowing layers re-rotate the keys they read by their own kind's RoPE.
  void window_and_sinks_match_reference() {
    const auto m = gemma4();
    EngineConfig cfg;
    cfg.num_blocks = 64;
    cfg.block_size = 8;
    cfg.window = 10;
    cfg.sinks = 2;
    const Run got = run(m, cfg);
    const float d = worst_vs_reference(m, got, 10, 2);
    qInfo("gemma4 window 10 + 2 sinks: max |dlogit| vs reference %.2e", static_cast<double>(d));
    QVERIFY(d < 1e-3f);
  }
};

QTEST_GUILESS_MAIN(TestGemma4)
#include "test_gemma4.moc"
