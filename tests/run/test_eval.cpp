// Quality numbers through the real engine (kvscope-cli eval's core): perplexity, KL divergence
// and top-1 agreement against the f32 full-attention run, for every KV dtype, and the
// StreamingLLM experiment (full attention vs window vs window + sinks) on
// resources/texts/long-story.txt with stories260K.
#include <QtTest>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "run/perplexity.h"
#include "paged_harness.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::shared_ptr<Model> load(const std::string& rel) { return Model::load((test::models_dir() / rel).string()); }

std::vector<TokenId> long_story(const Model& m) {
  // The text lives in the source tree (resources/), next to this file's folder.
  const std::string path = (kvscope::test::source_dir() / "resources/texts/long-story.txt").string();
  std::ifstream f(path);
  if (!f) qFatal("cannot read %s", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return m.tokenizer->encode(text, true, false);
}

EvalConfig config(KvDtype t, int32_t window = 0, int32_t sinks = 0) {
  EvalConfig c;
  c.kv_dtype = t;
  c.window = window;
  c.sinks = sinks;
  c.chunk = 64;
  c.threads = 2;
  return c;
}

}  // namespace

class TestEval : public QObject {
  Q_OBJECT
  std::shared_ptr<Model> model_;
  std::vector<TokenId> story_;

 private slots:
  void initTestCase() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    model_ = load("stories260K.gguf");
    story_ = long_story(*model_);
    qInfo("long-story.txt: %zu tokens with stories260K's tokenizer (BOS included)", story_.size());
    QVERIFY(story_.size() > 2000 && story_.size() < 3000);
  }

  // The progress callback sees the prompt being computed chunk by chunk up to the whole text,
  // and returning false stops the run with EvalStopped (the compare panel's stop at shutdown).
  void progress_reports_and_stops() {
    const std::vector<TokenId> text(story_.begin(), story_.begin() + 300);
    std::vector<int32_t> seen;
    eval_text(model_, text, config(KvDtype::F32), [&](int32_t done, int32_t total) {
      seen.push_back(done);
      return total == 300;
    });
    QVERIFY(seen.size() >= 300 / 64);  // chunked prefill: several steps
    QVERIFY(std::is_sorted(seen.begin(), seen.end()));
    QCOMPARE(seen.back(), 300);
    int calls = 0;
    QVERIFY_THROWS_EXCEPTION(
        EvalStopped, eval_text(model_, text, config(KvDtype::F32), [&](int32_t, int32_t) { return ++calls < 2; }));
    QCOMPARE(calls, 2);
  }

  // Two runs of the same config are bit-identical: KL exactly 0, agreement exactly 1.
  void f32_against_itself() {
    const std::vector<TokenId> text(story_.begin(), story_.begin() + 300);
    const EvalRun a = eval_text(model_, text, config(KvDtype::F32));
    const EvalRun b = eval_text(model_, text, config(KvDtype::F32));
    const LogitsAgreement ag = compare_logits(a.logits, b.logits);
    QCOMPARE(ag.kl_mean, 0.0);
    QCOMPARE(ag.top1, 1.0);
    QCOMPARE(a.perplexity, b.perplexity);
    QCOMPARE(a.n_predicted, 299);
    QCOMPARE(a.kv_bytes_per_token, int64_t{1280});
    QVERIFY(a.perplexity > 1.0 && a.perplexity < 10.0);  // a trained model on its kind of text
    // Perplexity is exp(mean NLL) of the recorded rows: check one row by hand.
    const auto& r0 = a.logits[0];
    double mx = -1e30, sum = 0;
    for (float v : r0) mx = std::max(mx, static_cast<double>(v));
    for (float v : r0) sum += std::exp(v - mx);
    const double nll0 = -(r0[static_cast<size_t>(text[1])] - mx - std::log(sum));
    QVERIFY(nll0 > 0 && nll0 < a.nll_mean * a.n_predicted);
  }

  // Quantized KV on the first 512 tokens (the model's trained length): small positive KL,
  // ordered by precision. Measured (KL / top-1): f16 1.3e-6 / 0.998, bf16 1.0e-4 / 0.988,
  // int8 1.1e-3 / 0.979, fp8_e4m3 1.1e-2 / 0.935, fp8_e5m2 5.5e-2 / 0.904.
  void quantized_kv_quality() {
    const std::vector<TokenId> text(story_.begin(), story_.begin() + 512);
    const EvalRun ref = eval_text(model_, text, config(KvDtype::F32));
    struct Want {
      KvDtype t;
      double kl_max_mean, top1_min;
      int64_t bytes;
    };
    const Want wants[] = {{KvDtype::F16, 1e-5, 0.99, 640},
                          {KvDtype::BF16, 5e-4, 0.97, 640},
                          {KvDtype::INT8, 5e-3, 0.95, 480},
                          {KvDtype::FP8_E4M3, 4e-2, 0.90, 480},
                          {KvDtype::FP8_E5M2, 0.15, 0.85, 480}};
    std::vector<double> kls;
    for (const Want& w : wants) {
      const EvalRun run = eval_text(model_, text, config(w.t));
      const LogitsAgreement ag = compare_logits(ref.logits, run.logits);
      qInfo("%-9s ppl %.4f (f32 %.4f)  KL mean %.3g  top-1 %.4f  %lld B/token", kv_dtype_name(w.t), run.perplexity,
            ref.perplexity, ag.kl_mean, ag.top1, static_cast<long long>(run.kv_bytes_per_token));
      QVERIFY(ag.kl_mean > 0.0);
      QVERIFY(ag.kl_mean < w.kl_max_mean);
      QVERIFY(ag.top1 >= w.top1_min);
      QCOMPARE(run.kv_bytes_per_token, w.bytes);
      QVERIFY(std::fabs(std::log(run.perplexity / ref.perplexity)) < 0.1);
      kls.push_back(ag.kl_mean);
    }
    QVERIFY(kls[0] < kls[1]);                     // f16 (10 mantissa bits) < bf16 (7)
    QVERIFY(kls[2] < kls[3] && kls[3] < kls[4]);  // int8 < e4m3 (3 bits) < e5m2 (2 bits)
  }

  // The engine's window / sink runs (chunked prefill, blocks outside the window dropped) give
  // the same logits as the backend driven directly with every block still present.
  void engine_window_runs_match_backend() {
    const std::vector<TokenId> text(story_.begin(), story_.begin() + 300);
    for (auto [w, s] : {std::pair{64, 0}, std::pair{64, 4}}) {
      const EvalRun run = eval_text(model_, text, config(KvDtype::F32, w, s));
      test::PagedRun direct(model_, 300, 16, 3, KvDtype::F32, 2, AttentionPolicy{w, s});
      const std::vector<TokenId> forced(text.begin() + 1, text.end());
      const auto rows = direct.teacher_forced({text[0]}, forced, forced.size());
      QCOMPARE(rows.size(), run.logits.size());
      float worst = 0;
      for (size_t r = 0; r < rows.size(); ++r)
        worst = std::max(worst, test::max_abs_diff(rows[r], run.logits[r].data(), rows[r].size()));
      qInfo("window %d sinks %d: engine vs direct backend max |dlogit| %.3g", w, s, static_cast<double>(worst));
      QVERIFY(worst < 1e-4f);
    }
  }

  // StreamingLLM's experiment on a text 2538 tokens long (window 64: the text is ~40 windows).
  // What stories260K actually does (docs/kv-compression.md): full attention degrades past its trained length
  // (512), window-only attention does NOT blow up when the first tokens leave the window (this
  // 260K-parameter model has no strong attention sink), and 4 sinks cost a little at window 64.
  // Asserted: those facts, and bounded KV blocks with a window.
  void window_and_sinks_on_long_text() {
    const EvalRun full = eval_text(model_, story_, config(KvDtype::F32));
    const EvalRun win = eval_text(model_, story_, config(KvDtype::F32, 64, 0));
    const EvalRun sinks = eval_text(model_, story_, config(KvDtype::F32, 64, 4));
    qInfo(
        "%zu tokens: full attention ppl %.4f (peak %d blocks), window 64 ppl %.4f (%d blocks), window 64 + 4 sinks ppl %.4f (%d blocks)",
        story_.size(), full.perplexity, full.peak_blocks_used, win.perplexity, win.peak_blocks_used, sinks.perplexity,
        sinks.peak_blocks_used);
    QVERIFY(win.perplexity < full.perplexity);
    QVERIFY(std::fabs(std::log(sinks.perplexity / win.perplexity)) < 0.1);
    // Window W, chunk C, block size B: blocks overlapping [pos - W + 1, pos] for a whole chunk,
    // plus the one sink block, plus one being filled.
    const int32_t bound = (64 + 64) / 16 + 1 + 1;
    QVERIFY(win.peak_blocks_used <= bound);
    QVERIFY(sinks.peak_blocks_used <= bound);
    // Full attention holds every block (snapshots are taken between steps, so the last chunk
    // is not in the peak).
    QVERIFY(full.peak_blocks_used >= static_cast<int32_t>(story_.size() - 64) / 16);
  }
};

QTEST_APPLESS_MAIN(TestEval)
#include "test_eval.moc"
