// Split-KV attention (cpu/attention_split.h): a pass cut into parts and merged equals the single
// pass, for the kernel alone and for the paged engine decoding a long sequence on 2 threads
// (which splits) against 1 thread (which never does), with full attention, with window + sinks,
// and with rot4 KV.
#include <QtTest>

#include <cmath>
#include <random>
#include <tuple>

#include "cpu/attention_split.h"
#include "cpu/cpu_backend.h"
#include "cpu/online_attention.h"
#include "engine/engine.h"
#include "kv/kv_dtype.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::vector<float> random_floats(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void pass(OnlineAttention& att, const float* k, const float* v, int32_t d, int32_t from, int32_t to) {
  for (int32_t p = from; p < to; p += OnlineAttention::kMaxChunk) {
    const int32_t n = std::min(OnlineAttention::kMaxChunk, to - p);
    att.add(k + static_cast<int64_t>(p) * d, d, v + static_cast<int64_t>(p) * d, d, n);
  }
}

// Greedy decode of one long sequence; returns every step's logits.
std::vector<std::vector<float>> decode_logits(const std::shared_ptr<const Model>& m, int threads, int32_t window,
                                              int32_t sinks, KvDtype dtype) {
  EngineConfig cfg;
  cfg.kv_dtype = dtype;
  cfg.num_blocks = 200;
  cfg.window = window;
  cfg.sinks = sinks;
  cfg.sched.max_model_len = 3000;
  Engine e(m, std::make_unique<CpuBackend>(m, threads), cfg);
  Request r;
  std::mt19937 rng(7);
  r.prompt.resize(1500);
  for (TokenId& t : r.prompt) t = static_cast<TokenId>(3 + rng() % 500);
  r.max_new_tokens = 24;
  r.ignore_eos = true;
  r.record_logits = true;
  const SeqId id = e.submit(r);
  e.run_until_idle();
  return e.recorded_logits(id);
}

}  // namespace

class TestAttentionSplit : public QObject {
  Q_OBJECT
 private slots:
  void merged_parts_equal_one_pass() {
    constexpr int32_t n_q = 4, d = 64, n = 1000;
    const auto q = random_floats(n_q * d, 1, 1.0f), k = random_floats(static_cast<size_t>(n) * d, 2, 1.0f),
               v = random_floats(static_cast<size_t>(n) * d, 3, 1.0f);
    std::vector<float> want(n_q * d);
    OnlineAttention whole(q.data(), n_q, d, 0.125f, want.data());
    pass(whole, k.data(), v.data(), d, 0, n);
    whole.finish();
    for (int32_t parts : {1, 2, 3, 5, 16}) {
      std::vector<float> acc(static_cast<size_t>(parts) * n_q * d), m(static_cast<size_t>(parts) * n_q);
      std::vector<double> l(static_cast<size_t>(parts) * n_q);
      for (int32_t p = 0; p < parts; ++p) {
        OnlineAttention a(q.data(), n_q, d, 0.125f, &acc[static_cast<size_t>(p) * n_q * d]);
        pass(a, k.data(), v.data(), d, n * p / parts, n * (p + 1) / parts);
        a.finish_partial(&m[static_cast<size_t>(p) * n_q], &l[static_cast<size_t>(p) * n_q]);
      }
      std::vector<float> got(n_q * d);
      merge_attention_parts({acc.data(), m.data(), l.data()}, parts, n_q, d, got.data());
      float worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      QVERIFY2(worst < 1e-5f, qPrintable(QStringLiteral("%1 parts: max |diff| %2").arg(parts).arg(worst)));
    }
  }

  void splits_only_when_threads_would_idle() {
    QCOMPARE(plan_attention_split(1, 4096, 2).parts, 4);  // decode, one KV head: every thread gets two parts
    QCOMPARE(plan_attention_split(1, 600, 2).parts, 2);   // no part under kMinKeysPerPart keys
    QCOMPARE(plan_attention_split(1, 300, 2).parts, 1);
    QCOMPARE(plan_attention_split(4, 8192, 2).parts, 1);  // enough pairs already
    QCOMPARE(plan_attention_split(1, 8192, 1).parts, 1);  // one thread: nothing to share
  }

  // The engine path: gemma-3-like synthetic model with ONE KV head, 1,500-token context (each
  // decode step is one (token, KV head) pair: 2 threads split it, 1 thread does not).
  void engine_decode_is_the_same_split_or_not() {
    SyntheticSpec spec;
    spec.n_head = 4;
    spec.n_head_kv = 1;
    spec.n_layer = 2;
    spec.seed = 11;
    const auto path = test::tmp_dir() / "attention-split-model.gguf";
    write_synthetic_model(spec, path.string());
    const std::shared_ptr<const Model> m = Model::load(path.string());
    // rot4 too: its rotation is undone on each part before the merge.
    for (const auto& [window, sinks, dtype] :
         {std::tuple{0, 0, KvDtype::F32}, std::tuple{1024, 4, KvDtype::F32}, std::tuple{0, 0, KvDtype::ROT4}}) {
      const auto one = decode_logits(m, 1, window, sinks, dtype), two = decode_logits(m, 2, window, sinks, dtype);
      QCOMPARE(one.size(), two.size());
      float worst = 0, scale = 0;
      for (size_t r = 0; r < one.size(); ++r)
        for (size_t i = 0; i < one[r].size(); ++i) {
          worst = std::max(worst, std::abs(one[r][i] - two[r][i]));
          scale = std::max(scale, std::abs(one[r][i]));
        }
      qInfo("window %d sinks %d %s: max |logit diff| %g (max |logit| %g)", window, sinks, kv_dtype_name(dtype), worst,
            scale);
      QVERIFY2(worst <= 1e-4f * std::max(1.0f, scale), "split-KV changed the logits beyond float rounding");
    }
  }
};

QTEST_APPLESS_MAIN(TestAttentionSplit)
#include "test_attention_split.moc"
