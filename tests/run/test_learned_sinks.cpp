// gpt-oss's learned sinks (one trained logit per head in every softmax) beside StreamingLLM's
// sink tokens (the first positions kept visible past a window). The learned ones are weights:
// dropping them (--learned-sinks off) changes the logits but not one byte of KV, and "off" is
// exactly the model with every sink logit at -inf (checked on a file rewritten that way). Sink
// tokens are cached positions: the same window with 4 of them holds more KV at its peak.
#include <QtTest>

#include <cmath>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "fuzz/gguf_rewrite.h"
#include "gguf/gguf_file.h"
#include "model/synthetic_model.h"
#include "paged_harness.h"
#include "reference_forward.h"
#include "run/perplexity.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::filesystem::path gpt_oss_file() {
  SyntheticSpec s;
  s.arch = "gpt-oss";
  s.n_vocab = 300;
  s.n_embd = 64;
  s.n_layer = 4;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 128;
  s.n_ctx = 1024;
  s.sliding_window = 16;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.seed = 21;
  const auto p = test::tmp_dir() / "learned-sinks-gpt-oss.gguf";
  write_synthetic_model(s, p.string());
  return p;
}

// The same file with every attn_sinks logit at -1e30: exp(sink - max) is exactly 0.
std::filesystem::path without_sinks(const std::filesystem::path& src) {
  const auto f = GgufFile::open(src.string());
  test::RewriteEdits e;
  e.tensor = [](test::TensorCopy& c) {
    if (c.name.find("attn_sinks") != std::string::npos) std::fill(c.data.begin(), c.data.end(), -1e30f);
  };
  const auto p = test::tmp_dir() / "learned-sinks-gpt-oss-minus-inf.gguf";
  test::rewrite_gguf(*f, e).write(p.string());
  return p;
}

std::vector<TokenId> text(int32_t n) {
  std::vector<TokenId> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(3 + (i * 11 + 5) % 290);
  return t;
}

std::vector<std::vector<float>> logits(const std::shared_ptr<Model>& m, bool learned) {
  EngineConfig cfg;
  cfg.num_blocks = 32;
  cfg.block_size = 8;
  cfg.learned_sinks = learned;
  Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
  Request r;
  r.prompt = text(40);
  r.max_new_tokens = 8;
  r.ignore_eos = true;
  r.record_logits = true;
  const SeqId id = e.submit(r);
  e.run_until_idle();
  return e.recorded_logits(id);
}

float max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d = std::max(d, test::max_abs_diff(a[i], b[i].data(), a[i].size()));
  return d;
}

}  // namespace

class TestLearnedSinks : public QObject {
  Q_OBJECT
 private slots:
  void off_is_the_model_with_sinks_at_minus_infinity() {
    const auto path = gpt_oss_file();
    const auto m = Model::load(path.string());
    const auto minus_inf = Model::load(without_sinks(path).string());
    const auto on = logits(m, true), off = logits(m, false), reference = logits(minus_inf, true);
    const float d_on_off = max_diff(on, off), d_off_ref = max_diff(off, reference);
    qInfo("learned sinks on vs off: max |dlogit| %.3e; off vs sinks at -inf: %.3e", static_cast<double>(d_on_off),
          static_cast<double>(d_off_ref));
    QVERIFY2(d_on_off > 1e-3f, "dropping the learned sinks changed nothing");
    QVERIFY(d_off_ref < 1e-5f);
    // And the reference forward of the rewritten file agrees on the prompt's last step.
    test::ReferenceForward ref(minus_inf);
    std::vector<float> want;
    for (TokenId t : text(40)) want = ref.step(t);
    QVERIFY(test::max_abs_diff(off[0], want.data(), want.size()) < 1e-3f);
  }

  // On a 200-token text: the learned sinks cost no KV; 4 sink tokens beside a 32-token window
  // cost 4 more positions per full layer than the window alone.
  void memory_of_learned_sinks_and_sink_tokens() {
    const auto m = Model::load(gpt_oss_file().string());
    const std::vector<TokenId> toks = text(200);
    auto run = [&](int32_t window, int32_t sinks, bool learned) {
      EvalConfig c;
      c.window = window;
      c.sinks = sinks;
      c.learned_sinks = learned;
      c.block_size = 8;
      c.threads = 2;
      return eval_text(m, toks, c);
    };
    const EvalRun full = run(0, 0, true), full_off = run(0, 0, false), window = run(32, 0, true),
                  window_sinks = run(32, 4, true);
    qInfo("peak KV bytes: full %lld, full without learned sinks %lld, window 32 %lld, window 32 + 4 sink tokens %lld",
          static_cast<long long>(full.peak_kv_bytes), static_cast<long long>(full_off.peak_kv_bytes),
          static_cast<long long>(window.peak_kv_bytes), static_cast<long long>(window_sinks.peak_kv_bytes));
    QCOMPARE(full_off.peak_kv_bytes, full.peak_kv_bytes);
    QCOMPARE(full_off.kv_bytes_per_token, full.kv_bytes_per_token);
    QVERIFY(full_off.nll_mean != full.nll_mean);
    QVERIFY(window_sinks.peak_kv_bytes > window.peak_kv_bytes);
    QVERIFY(window.peak_kv_bytes < full.peak_kv_bytes);
  }
};

QTEST_GUILESS_MAIN(TestLearnedSinks)
#include "test_learned_sinks.moc"
