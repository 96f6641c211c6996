// RoPE scaling: llama 3.1+ per-pair frequency factors (rope_freqs.weight) and linear scaling
// (rope.scaling.type = linear). Synthetic llama models get the tensor / keys added, and the
// engine's paged forward is compared with the plain reference forward that applies them.
#include <QtTest>

#include <cmath>
#include <filesystem>
#include <random>

#include "cpu/ops.h"
#include "fuzz/gguf_rewrite.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "paged_harness.h"
#include "reference_forward.h"
#include "test_support.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

// The shape of llama 3.1's factors: 1 for high frequencies, 8 for low ones, smooth in between.
std::vector<float> llama3_like_factors(int32_t n) {
  std::vector<float> f(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    const float t = static_cast<float>(i) / static_cast<float>(n - 1);
    f[static_cast<size_t>(i)] = t < 0.3f ? 1.0f : t > 0.7f ? 8.0f : 1.0f + 7.0f * (t - 0.3f) / 0.4f;
  }
  return f;
}

fs::path base_model() {
  const fs::path p = test::tmp_dir() / "rope-base.gguf";
  SyntheticSpec s;
  s.n_layer = 2;
  s.n_ctx = 512;
  write_synthetic_model(s, p.string());
  return p;
}

fs::path with_edits(const std::string& name, const std::function<void(GgufWriter&)>& edit) {
  auto f = GgufFile::open(base_model().string());
  GgufWriter w = test::rewrite_gguf(*f);
  edit(w);
  const fs::path p = test::tmp_dir() / name;
  w.write(p.string());
  return p;
}

std::vector<TokenId> tokens(int32_t n, int32_t n_vocab) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<TokenId> d(3, n_vocab - 1);
  std::vector<TokenId> t(static_cast<size_t>(n));
  t[0] = 1;
  for (int32_t i = 1; i < n; ++i) t[static_cast<size_t>(i)] = d(rng);
  return t;
}

// Prompt of 40 as one batch, then decode steps to 300 positions (low frequencies need long
// distances to matter): worst |logit difference| against the reference forward.
float engine_vs_reference(const std::shared_ptr<Model>& m, std::vector<std::vector<float>>* logits = nullptr) {
  const auto toks = tokens(300, m->config.n_vocab);
  test::ReferenceForward ref(m);
  test::PagedRun run(m, 300, 16, 7);
  float worst = 0;
  auto got = run.feed(std::vector<TokenId>(toks.begin(), toks.begin() + 40), 0);
  std::vector<float> want;
  for (size_t i = 0; i < 40; ++i) want = ref.step(toks[i]);
  worst = std::max(worst, test::max_abs_diff(got, want.data(), got.size()));
  if (logits) logits->push_back(got);
  for (size_t i = 40; i < toks.size(); ++i) {
    got = run.feed({toks[i]}, static_cast<int32_t>(i));
    want = ref.step(toks[i]);
    worst = std::max(worst, test::max_abs_diff(got, want.data(), got.size()));
    if (logits) logits->push_back(got);
  }
  return worst;
}

}  // namespace

class TestRopeScaling : public QObject {
  Q_OBJECT

 private slots:
  void factors_of_one_change_nothing_and_two_halve_the_angle() {
    std::vector<float> x(64), a, b, c;
    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    for (auto& v : x) v = d(rng);
    const std::vector<float> ones(32, 1.0f), twos(32, 2.0f);
    for (RopeStyle style : {RopeStyle::Normal, RopeStyle::Neox}) {
      for (int32_t pos : {0, 1, 17, 4000}) {
        a = x, b = x, c = x;
        rope_inplace(a.data(), 64, pos, 10000.0f, 1.0f, style);
        rope_inplace(b.data(), 64, pos, 10000.0f, 1.0f, style, ones.data());
        QVERIFY(a == b);
        // Dividing by 2 and scaling by 0.5 are both exact: the same bits.
        a = x, b = x;
        rope_inplace(a.data(), 64, pos, 10000.0f, 0.5f, style);
        rope_inplace(b.data(), 64, pos, 10000.0f, 1.0f, style, twos.data());
        QVERIFY(a == b);
        // The cached cos/sin path agrees with the direct one.
        std::vector<float> cs(64);
        rope_cos_sin_row(64, pos, 10000.0f, 1.0f, cs.data(), twos.data());
        c = x;
        rope_apply(c.data(), 64, cs.data(), style);
        for (size_t i = 0; i < 64; ++i) QVERIFY(std::fabs(c[i] - b[i]) <= 1e-6f * (1 + std::fabs(b[i])));
      }
    }
  }

  void llama3_factors_match_the_reference() {
    const auto factors = llama3_like_factors(32);  // head_dim 64
    const fs::path p = with_edits(
        "rope-llama3.gguf", [&](GgufWriter& w) { w.add_tensor("rope_freqs.weight", {32}, GgmlType::F32, factors); });
    auto m = Model::load(p.string());
    QCOMPARE(m->config.rope_freq_factors, factors);
    std::vector<std::vector<float>> scaled, plain;
    const float worst = engine_vs_reference(m, &scaled);
    qInfo("llama3 factors: engine vs reference max |dlogit| %.3g", worst);
    QVERIFY(worst < 1e-3f);
    // The factors matter: the same weights without them give other logits.
    auto m0 = Model::load(base_model().string());
    QVERIFY(m0->config.rope_freq_factors.empty());
    engine_vs_reference(m0, &plain);
    float diff = 0;
    for (size_t i = 0; i < plain.size(); ++i)
      diff = std::max(diff, test::max_abs_diff(plain[i], scaled[i].data(), plain[i].size()));
    qInfo("with vs without factors: max |dlogit| %.3g", diff);
    QVERIFY(diff > 1e-2f);
  }

  void llama3_scaling_type_is_accepted_with_the_tensor() {
    const fs::path p = with_edits("rope-llama3-typed.gguf", [&](GgufWriter& w) {
      w.set_string("llama.rope.scaling.type", "llama3");
      w.add_tensor("rope_freqs.weight", {32}, GgmlType::F32, llama3_like_factors(32));
    });
    QCOMPARE(Model::load(p.string())->config.rope_freq_factors.size(), size_t{32});
    const fs::path q = with_edits("rope-llama3-no-tensor.gguf",
                                  [&](GgufWriter& w) { w.set_string("llama.rope.scaling.type", "llama3"); });
    QVERIFY_THROWS_EXCEPTION(ModelError, ModelConfig::from_gguf(*GgufFile::open(q.string())));
  }

  void linear_scaling_matches_the_reference() {
    const fs::path p = with_edits("rope-linear.gguf", [&](GgufWriter& w) {
      w.set_string("llama.rope.scaling.type", "linear");
      w.set_f32("llama.rope.scaling.factor", 4.0f);
    });
    auto m = Model::load(p.string());
    QCOMPARE(m->config.rope_freq_scale, 0.25f);
    const float worst = engine_vs_reference(m);
    qInfo("linear x4: engine vs reference max |dlogit| %.3g", worst);
    QVERIFY(worst < 1e-3f);
  }

  void bad_factors_are_refused() {
    for (const auto& [name, ne, values] : {std::tuple{"rope-short.gguf", int64_t{16}, std::vector<float>(16, 1.0f)},
                                           std::tuple{"rope-negative.gguf", int64_t{32}, std::vector<float>(32, -1.0f)},
                                           std::tuple{"rope-nan.gguf", int64_t{32}, std::vector<float>(32, NAN)}}) {
      const fs::path p =
          with_edits(name, [&](GgufWriter& w) { w.add_tensor("rope_freqs.weight", {ne}, GgmlType::F32, values); });
      try {
        ModelConfig::from_gguf(*GgufFile::open(p.string()));
        QFAIL(name);
      } catch (const ModelError& e) {
        QVERIFY2(std::string(e.what()).find("rope_freqs") != std::string::npos, e.what());
      }
    }
  }
};

QTEST_APPLESS_MAIN(TestRopeScaling)
#include "test_rope_scaling.moc"
