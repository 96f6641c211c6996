// Sampler: greedy tie-breaking, temperature / top-k / top-p / min-p truncation, repetition
// penalty and seeded reproducibility, checked on hand-made logits with known distributions.
#include <QtTest>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "engine/sampler.h"

using namespace kvscope;

namespace {

std::map<TokenId, int> histogram(const SamplingParams& p, const std::vector<float>& logits, int n,
                                 const std::vector<TokenId>& hist = {}) {
  Sampler s(p);
  std::map<TokenId, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits, hist)];
  return h;
}

}  // namespace

class TestSampler : public QObject {
  Q_OBJECT
 private slots:
  void greedy_lowest_id_wins_ties() {
    QCOMPARE(argmax_token(std::vector<float>{1, 3, 3, 2}), 1);
    Sampler s(SamplingParams{});
    QCOMPARE(s.sample(std::vector<float>{0.5f, -1, 7, 7}, {}), 2);
  }

  void argmax_is_the_running_scan() {
    // The 16-lane argmax against the one-compare-per-element scan it replaced: ties, NaNs
    // (at 0 and elsewhere), -0 / +0, every length around the lane count, and a vocabulary.
    auto scan = [](const std::vector<float>& v) {
      TokenId best = 0;
      for (size_t i = 1; i < v.size(); ++i)
        if (v[i] > v[static_cast<size_t>(best)]) best = static_cast<TokenId>(i);
      return best;
    };
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> level(-4, 4);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t n : {1, 2, 15, 16, 17, 31, 33, 100, 262144})
      for (int trial = 0; trial < 40; ++trial) {
        std::vector<float> v(n);
        for (float& x : v) x = static_cast<float>(level(rng));  // many ties
        if (trial % 4 == 1) v[rng() % n] = nan;
        if (trial % 4 == 2) v[0] = nan;
        if (trial % 4 == 3) {
          for (float& x : v) x = x > 0 ? 0.0f : x;
          v[rng() % n] = -0.0f;
        }
        QCOMPARE(argmax_token(v), scan(v));
      }
  }

  void top_k_keeps_only_k_best() {
    SamplingParams p;
    p.temperature = 5.0f;  // nearly flat: without truncation every token would show up
    p.top_k = 2;
    const auto h = histogram(p, {1.0f, 4.0f, 3.0f, 2.0f, 0.0f}, 2000);
    QCOMPARE(static_cast<int>(h.size()), 2);
    QVERIFY(h.count(1) && h.count(2));
  }

  void top_p_keeps_smallest_nucleus() {
    // Probabilities at T=1: ln-spaced so they are 0.5, 0.25, 0.125, 0.125.
    const std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75: tokens 0 and 1
    const auto h = histogram(p, logits, 4000);
    QCOMPARE(static_cast<int>(h.size()), 2);
    // Renormalised 2:1 between the two survivors.
    const double ratio = static_cast<double>(h.at(0)) / h.at(1);
    QVERIFY2(ratio > 1.7 && ratio < 2.4, qPrintable(QString::number(ratio)));
  }

  void min_p_drops_unlikely_tokens() {
    const std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.08f), std::log(0.02f)};
    SamplingParams p;
    p.temperature = 1.0f;
    p.min_p = 0.1f;  // floor 0.06: keeps 0.6, 0.3, 0.08
    const auto h = histogram(p, logits, 4000);
    QCOMPARE(static_cast<int>(h.size()), 3);
    QVERIFY(!h.count(3));
  }

  void temperature_sharpens_and_flattens() {
    const std::vector<float> logits = {2.0f, 1.0f};
    SamplingParams cold, hot;
    cold.temperature = 0.25f;
    hot.temperature = 4.0f;
    const auto hc = histogram(cold, logits, 4000), hh = histogram(hot, logits, 4000);
    // p(0) = 1 / (1 + e^(-1/T)): 0.982 at T=0.25, 0.562 at T=4.
    QVERIFY(hc.at(0) > 3800);
    QVERIFY(hh.at(0) > 2000 && hh.at(0) < 2500);
  }

  void repetition_penalty_llama_cpp_semantics() {
    SamplingParams p;
    p.repetition_penalty = 2.0f;
    Sampler s(p);
    // Token 0 (logit 3, seen) becomes 1.5 < token 1's 2: greedy picks 1.
    QCOMPARE(s.sample(std::vector<float>{3.0f, 2.0f, -1.0f}, std::vector<TokenId>{0}), 1);
    // A negative logit is multiplied: -1 -> -2, so token 2 (seen) cannot overtake anything.
    QCOMPARE(s.sample(std::vector<float>{-3.0f, -1.5f, -1.0f}, std::vector<TokenId>{2}), 1);
  }

  // OpenAI's logit_bias: added to the logits before greedy and sampling alike.
  void logit_bias_is_added_first() {
    const std::vector<float> logits = {3.0f, 2.0f, 1.0f};
    SamplingParams p;
    p.logit_bias = {{2, 2.5f}};  // 1 + 2.5 beats 3
    QCOMPARE(Sampler(p).sample(logits, {}), 2);
    p.logit_bias = {{0, -100.0f}, {7, 50.0f}};  // banned; an id outside the vocabulary is ignored
    QCOMPARE(Sampler(p).sample(logits, {}), 1);
    p.temperature = 1.0f;
    p.logit_bias = {{1, 100.0f}};
    const auto h = histogram(p, logits, 500);
    QCOMPARE(h.at(1), 500);
  }

  void same_seed_same_sequence_other_seed_differs() {
    const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    SamplingParams a;
    a.temperature = 1.0f;
    a.seed = 42;
    SamplingParams b = a;
    b.seed = 43;
    Sampler s1(a), s2(a), s3(b);
    std::vector<TokenId> r1, r2, r3;
    for (int i = 0; i < 64; ++i) {
      r1.push_back(s1.sample(logits, {}));
      r2.push_back(s2.sample(logits, {}));
      r3.push_back(s3.sample(logits, {}));
    }
    QCOMPARE(r1, r2);
    QVERIFY(r1 != r3);
  }
};

QTEST_APPLESS_MAIN(TestSampler)
#include "test_sampler.moc"
