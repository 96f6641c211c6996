// Every KV-cache feature on the 2025-26 families (MoE, fused q/k/v and [gate; up], post-norms,
// no-RoPE layers, deepseek2's latent cache), each measured against the plain run of the same model on the same input:
// prefix caching, chunked prefill and preemption must not change a logit beyond summation order;
// a window with sinks must match the reference forward (smollm3's no-RoPE layer is never
// re-rotated, deepseek2's RoPE key is re-rotated after its latent); every KV dtype and token
// eviction run to the end with finite logits (a latent cache refuses the 4-/2-bit ones).
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

const char* const kArchs[] = {"qwen3moe", "glm4moe", "mistral3", "phi3", "glm4", "smollm3", "gpt-oss", "deepseek2"};

std::shared_ptr<Model> synthetic(const std::string& arch) {
  SyntheticSpec s;
  s.arch = arch;
  s.n_vocab = 300;
  s.n_embd = 64;
  s.n_layer = 4;  // smollm3's layer 3 has no RoPE
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 128;
  s.n_ctx = 512;
  s.seed = 5;
  s.sliding_window = 16;                                        // gpt-oss: its even layers slide
  if (arch != "phi3" && arch != "glm4" && arch != "smollm3") {  // mistral3 too: its MoE form
    s.n_expert = 4;
    s.n_expert_used = 2;
  }
  const auto path = test::tmp_dir() / ("arch-features-" + arch + ".gguf");
  write_synthetic_model(s, path.string());
  return Model::load(path.string());
}

std::vector<TokenId> tokens(int32_t n, int32_t offset) { return test::token_ids(n, offset); }

using Logits = std::vector<std::vector<std::vector<float>>>;  // [request][step][vocab]
struct Counts {
  int32_t cached = 0, preemptions = 0;  // prompt tokens reused from the prefix cache; preemptions
};

// Three requests, the second sharing the first's 32-token beginning; every step's logits.
Logits run(const std::shared_ptr<Model>& m, EngineConfig cfg, Counts* counts = nullptr) {
  Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
  std::vector<TokenId> a = tokens(40, 0), b(a.begin(), a.begin() + 32), c = tokens(23, 5);
  const auto more = tokens(9, 9);
  b.insert(b.end(), more.begin(), more.end());
  std::vector<SeqId> ids;
  for (const auto* p : {&a, &b, &c}) {
    Request r;
    r.prompt = *p;
    r.max_new_tokens = 12;
    r.ignore_eos = true;
    r.record_logits = true;
    ids.push_back(e.submit(r));
    if (p == &a) e.run_until_idle();  // the second request then finds the first's blocks cached
  }
  e.run_until_idle();
  Logits out;
  for (SeqId id : ids) {
    if (!e.sequence(id).error.empty()) throw std::runtime_error(e.sequence(id).error);
    out.push_back(e.recorded_logits(id));
    if (counts) counts->cached += e.sequence(id).num_cached_prompt, counts->preemptions += e.sequence(id).preemptions;
  }
  return out;
}

float max_diff(const Logits& x, const Logits& y) {
  float d = 0;
  for (size_t r = 0; r < x.size(); ++r)
    for (size_t s = 0; s < std::min(x[r].size(), y[r].size()); ++s)
      d = std::max(d, test::max_abs_diff(x[r][s], y[r][s].data(), x[r][s].size()));
  return d;
}

}  // namespace

class TestArchFeatures : public QObject {
  Q_OBJECT
 private slots:
  void cache_features_match_plain_run_data() {
    QTest::addColumn<QString>("arch");
    for (const char* a : kArchs) QTest::newRow(a) << a;
  }
  void cache_features_match_plain_run() {
    QFETCH(QString, arch);
    const auto m = synthetic(arch.toStdString());
    EngineConfig plain;
    plain.prefix_caching = false;
    plain.num_blocks = 64;
    plain.block_size = 8;
    const auto want = run(m, plain);
    EngineConfig cached = plain;
    cached.prefix_caching = true;
    EngineConfig chunked = cached;
    chunked.sched.max_batched_tokens = 8;
    EngineConfig tight = cached;
    // 9 blocks of 8: the second and third requests are admitted together (6 + 3 blocks) and
    // then outgrow the pool while decoding, so one is preempted and resumed.
    tight.num_blocks = 9;
    for (const auto& [name, cfg] :
         {std::pair{"prefix caching", cached}, std::pair{"chunked prefill", chunked}, std::pair{"tight pool", tight}}) {
      Counts n;
      const float d = max_diff(run(m, cfg, &n), want);
      qInfo("%s %s: max |dlogit| %.2e (%d prompt tokens from the prefix cache, %d preemptions)", qPrintable(arch), name,
            static_cast<double>(d), n.cached, n.preemptions);
      QVERIFY2(d < 1e-3f, name);
      QVERIFY2(n.cached >= 32, "the shared beginning was not served from the prefix cache");
      if (cfg.num_blocks == tight.num_blocks) QVERIFY2(n.preemptions > 0, "the tight pool preempted nothing");
    }
  }

  void window_and_sinks_match_reference_data() { cache_features_match_plain_run_data(); }
  void window_and_sinks_match_reference() {
    QFETCH(QString, arch);
    const auto m = synthetic(arch.toStdString());
    AttentionPolicy policy;
    policy.window = 8;
    policy.sinks = 2;
    test::PagedRun run(m, 40, 8, 3, KvDtype::F32, 2, policy);
    test::ReferenceForward ref(m, 8, 2, test::RopeAt::CachePosition);
    const auto toks = tokens(40, 1);
    float worst = 0;
    for (int32_t i = 0; i < 40; ++i) {
      const auto want = ref.step(toks[static_cast<size_t>(i)]);
      const auto got = run.feed({toks[static_cast<size_t>(i)]}, i);
      worst = std::max(worst, test::max_abs_diff(got, want.data(), want.size()));
    }
    qInfo("%s window 8 + 2 sinks: max |dlogit| %.2e", qPrintable(arch), static_cast<double>(worst));
    QVERIFY(worst < 1e-3f);
  }

  // DeepSeek-V3's grouped routing (8 experts in 4 groups, 2 groups kept, 2 experts chosen) and
  // V2-Lite's single attn_q: the paged engine against the reference forward's definitions.
  void deepseek2_variants_match_reference() {
    for (const bool lite : {false, true}) {
      SyntheticSpec s;
      s.arch = "deepseek2";
      s.n_vocab = 300;
      s.n_embd = 64;
      s.n_layer = 3;
      s.n_head = 4;
      s.n_ff = 128;
      s.n_ctx = 512;
      s.seed = 9;
      s.n_expert = 8;
      s.n_expert_used = 2;
      s.n_expert_group = 4;
      s.n_group_used = 2;
      s.q_lora_rank = lite ? 0 : 96;
      const auto path = test::tmp_dir() / (lite ? "deepseek2-lite.gguf" : "deepseek2-groups.gguf");
      write_synthetic_model(s, path.string());
      const auto m = Model::load(path.string());
      QCOMPARE(m->config.moe.n_group, 4);
      test::PagedRun run(m, 40, 8, 3);
      test::ReferenceForward ref(m);
      const auto toks = tokens(30, 2);
      float worst = 0;
      for (int32_t i = 0; i < 30; ++i) {
        const auto want = ref.step(toks[static_cast<size_t>(i)]);
        const auto got = run.feed({toks[static_cast<size_t>(i)]}, i);
        worst = std::max(worst, test::max_abs_diff(got, want.data(), want.size()));
      }
      qInfo("deepseek2 %s: max |dlogit| %.2e", lite ? "with one attn_q" : "with grouped routing",
            static_cast<double>(worst));
      QVERIFY(worst < 1e-3f);
    }
  }

  void kv_dtypes_and_eviction_run_data() { cache_features_match_plain_run_data(); }
  void kv_dtypes_and_eviction_run() {
    QFETCH(QString, arch);
    const auto m = synthetic(arch.toStdString());
    EngineConfig base;
    base.num_blocks = 64;
    base.block_size = 8;
    const auto f32 = run(m, base);
    for (KvDtype d : kAllKvDtypes) {
      EngineConfig cfg = base;
      cfg.kv_dtype = d;
      if (m->config.latent_kv() && kv_dtype_packed(d)) {
        try {
          run(m, cfg);
          QFAIL(qPrintable(QString("a latent cache accepted ") + kv_dtype_name(d)));
        } catch (const std::invalid_argument& e) {
          QVERIFY2(std::string(e.what()).find("latent KV cache") != std::string::npos, e.what());
        }
        continue;
      }
      const auto got = run(m, cfg);
      for (const auto& req : got)
        for (const auto& row : req)
          for (float x : row) QVERIFY2(std::isfinite(x), kv_dtype_name(d));
      // The prompt's step of every request: later steps follow each run's own sampled tokens,
      // and one near-tie decided differently (deepseek2's routing makes them common) is not a
      // precision measure.
      float first = 0;
      for (size_t r = 0; r < got.size(); ++r)
        first = std::max(first, test::max_abs_diff(got[r][0], f32[r][0].data(), got[r][0].size()));
      if (d == KvDtype::F16 || d == KvDtype::BF16) QVERIFY2(first < 0.1f, kv_dtype_name(d));
    }
    EngineConfig evict = base;
    evict.evict = parse_evict("h2o:16");
    const auto got = run(m, evict);
    QCOMPARE(got.size(), size_t{3});
    for (const auto& req : got) QCOMPARE(req.size(), size_t{12});
  }
};

QTEST_GUILESS_MAIN(TestArchFeatures)
#include "test_arch_features.moc"
