// Attention sinks (StreamingLLM): (a) the CPU backend's rotation by cache position matches the
// shared reference (tests/support/reference_forward.h) in its cache-position mode; window-only
// attention keeps absolute positions (checked against the shared reference); (b) the engine
// generates past the model's trained context with a bounded number of KV blocks.
#include <QtTest>

#include <cmath>
#include <random>
#include <set>

#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "engine/engine.h"
#include "paged_harness.h"
#include "reference_forward.h"
#include "run/perplexity.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::shared_ptr<Model> load(const std::string& rel) { return Model::load((test::models_dir() / rel).string()); }

std::vector<TokenId> random_tokens(int32_t n, int32_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> d(3, n_vocab - 1);
  std::vector<TokenId> t(static_cast<size_t>(n));
  t[0] = 1;
  for (int32_t i = 1; i < n; ++i) t[static_cast<size_t>(i)] = d(rng);
  return t;
}

// The StreamingLLM definition is the oracle's CachePosition mode (tests/support/reference_forward.h):
// keys cached un-rotated, the key vis[t] rotated to position t and the query to vis.size() - 1.

// Backend run: the prompt as one batch (every token with its own visible set), then decode
// steps; logits after the prompt and after every decode step.
std::vector<std::vector<float>> backend_rows(std::shared_ptr<const Model> m, const std::vector<TokenId>& toks,
                                             size_t n_prompt, AttentionPolicy policy, int32_t bs) {
  test::PagedRun run(m, static_cast<int32_t>(toks.size()), bs, 17, KvDtype::F32, 2, policy);
  const std::vector<TokenId> prompt(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(n_prompt));
  const std::vector<TokenId> forced(toks.begin() + static_cast<std::ptrdiff_t>(n_prompt), toks.end());
  return run.teacher_forced(prompt, forced, forced.size());
}

template <typename Ref>
std::vector<std::vector<float>> reference_rows(Ref& ref, const std::vector<TokenId>& toks, size_t n_prompt) {
  std::vector<std::vector<float>> rows;
  for (size_t i = 0; i + 1 < toks.size(); ++i) {
    auto l = ref.step(toks[i]);
    if (i + 1 >= n_prompt) rows.push_back(std::move(l));
  }
  return rows;
}

float worst_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float w = 0;
  for (size_t r = 0; r < std::min(a.size(), b.size()); ++r)
    w = std::max(w, test::max_abs_diff(a[r], b[r].data(), a[r].size()));
  return w;
}

}  // namespace

class TestSinks : public QObject {
  Q_OBJECT
 private slots:
  // The split rotation used at attention time is the same arithmetic as rope_inplace (equal up
  // to the compiler's FMA contraction choices, hence a few ulps rather than bit equality).
  void rope_split_matches_rope_inplace() {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (RopeStyle st : {RopeStyle::Normal, RopeStyle::Neox})
      for (int32_t pos : {0, 1, 7, 100, 2047, 5000}) {
        std::vector<float> a(64), cs(64);
        for (auto& v : a) v = nd(rng);
        std::vector<float> b = a;
        rope_inplace(a.data(), 64, pos, 10000.0f, 1.0f, st);
        rope_cos_sin_row(64, pos, 10000.0f, 1.0f, cs.data());
        rope_apply(b.data(), 64, cs.data(), st);
        for (size_t i = 0; i < a.size(); ++i) QVERIFY(std::fabs(a[i] - b[i]) <= 4e-7f * (1.0f + std::fabs(a[i])));
      }
  }

  void cache_positions_match_reference_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("window");
    QTest::addColumn<int>("sinks");
    QTest::newRow("stories260K W24 S4") << "stories260K.gguf" << 24 << 4;
    QTest::newRow("stories260K W16 S1") << "stories260K.gguf" << 16 << 1;
    QTest::newRow("synth-llama W20 S3") << "synthetic/synth-llama-f32.gguf" << 20 << 3;
    QTest::newRow("synth-qwen2 (neox, bias) W24 S4") << "synthetic/synth-qwen2-f32.gguf" << 24 << 4;
    QTest::newRow("synth-qwen3 (qk norm) W24 S2") << "synthetic/synth-qwen3-f32.gguf" << 24 << 2;
    QTest::newRow("synth-gemma3 (own SWA 32) W40 S4") << "synthetic/synth-gemma3-f32.gguf" << 40 << 4;
  }
  // (a) With sinks, the backend equals the cache-position definition, differs from the
  // absolute-position one once the window has slid (so the test can tell them apart), and
  // equals full attention while nothing has left the window.
  void cache_positions_match_reference() {
    QFETCH(QString, model);
    QFETCH(int, window);
    QFETCH(int, sinks);
    KVSCOPE_REQUIRE_FILE(test::models_dir() / model.toStdString());
    auto m = load(model.toStdString());
    const int32_t n = 3 * window + 10;
    const auto toks = random_tokens(n, m->config.n_vocab, 5);
    const size_t n_prompt = static_cast<size_t>(window + 7);  // the prompt batch already slides the window
    for (int32_t bs : {8, 16}) {
      const auto got = backend_rows(m, toks, n_prompt, AttentionPolicy{window, sinks}, bs);
      test::ReferenceForward ref(m, window, sinks, test::RopeAt::CachePosition);
      const auto want = reference_rows(ref, toks, n_prompt);
      QCOMPARE(got.size(), want.size());
      const float d = worst_diff(want, got);
      test::ReferenceForward absolute(m, window, sinks);
      const float d_abs = worst_diff(reference_rows(absolute, toks, n_prompt), got);
      qInfo("bs %d: max |dlogit| vs cache-position reference %.3g, vs absolute-position reference %.3g", bs,
            static_cast<double>(d), static_cast<double>(d_abs));
      QVERIFY(d < 1e-3f);
      QVERIFY(d_abs > 1e-2f);
    }
    // Short text (nothing outside the window yet): cache positions are text positions.
    const std::vector<TokenId> short_toks(toks.begin(), toks.begin() + std::min(window, 20));
    const auto sink_rows = backend_rows(m, short_toks, 5, AttentionPolicy{window, sinks}, 16);
    const auto full_rows = backend_rows(m, short_toks, 5, AttentionPolicy{}, 16);
    QVERIFY(worst_diff(full_rows, sink_rows) < 1e-4f);
  }

  // The StreamingLLM table's path on a Gemma 3-shaped model: eval_text through the engine (chunked
  // prefill, the hybrid KV cache: global layers with window W + S sinks, the model's own sliding
  // layers with min(W, 32) + S sinks, every key at its cache position) gives, position by
  // position, the NLL of the cache-position definition above. With sinks in the global layers
  // only, the sliding layers keep their own window without sinks, and the result differs.
  void eval_with_sinks_matches_cache_position_reference() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "synthetic/synth-gemma3-f32.gguf");
    auto m = load("synthetic/synth-gemma3-f32.gguf");
    QVERIFY(m->config.sliding_window > 0);
    const auto toks = random_tokens(130, m->config.n_vocab, 9);
    struct Case {
      int32_t w, s;
      bool sliding_sinks;
    };
    std::vector<std::vector<float>> nll;
    for (Case k : {Case{48, 4, true}, Case{24, 2, true}, Case{48, 4, false}}) {
      const int32_t w = k.w, s = k.s;
      EvalConfig ec;
      ec.window = w;
      ec.sinks = s;
      ec.sinks_in_sliding_layers = k.sliding_sinks;
      ec.chunk = 20;  // chunks that straddle block and window edges
      ec.threads = 2;
      ec.keep_logits = false;
      const EvalRun run = eval_text(m, toks, ec);
      test::ReferenceForward ref(m, w, s, test::RopeAt::CachePosition, k.sliding_sinks);
      double worst = 0;
      for (size_t i = 0; i + 1 < toks.size(); ++i) {
        const std::vector<float> lg = ref.step(toks[i]);
        worst = std::max(worst, std::fabs(run.nll[i] - token_nll(lg, toks[i + 1])));
      }
      qInfo("window %d sinks %d (%s layers): eval NLL vs cache-position reference, max |dNLL| %.3g", w, s,
            k.sliding_sinks ? "all" : "global", worst);
      QVERIFY(worst < 1e-3);
      nll.push_back(run.nll);
    }
    double diff = 0;  // same window and sinks, sinks in the sliding layers or not
    for (size_t i = 0; i < nll[0].size(); ++i)
      diff = std::max(diff, static_cast<double>(std::fabs(nll[0][i] - nll[2][i])));
    QVERIFY(diff > 1e-2);
  }

  // Window-only attention is the paper's baseline: absolute positions, a plain sliding window.
  void window_only_keeps_absolute_positions() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = load("stories260K.gguf");
    const auto toks = random_tokens(90, m->config.n_vocab, 6);
    const auto got = backend_rows(m, toks, 40, AttentionPolicy{24, 0}, 16);
    test::ReferenceForward ref(m, 24, 0);
    const float d = worst_diff(reference_rows(ref, toks, 40), got);
    qInfo("window-only vs absolute-position reference: max |dlogit| %.3g", static_cast<double>(d));
    QVERIFY(d < 1e-3f);
  }

  // (b) stories260K (GGUF context 2048) generates 4096 tokens with window 128 + 4 sinks; KV
  // blocks in use never exceed window/bs + one sink block + 2 (the partial block being written
  // and the one the window is leaving).
  void generates_past_trained_context_with_bounded_blocks() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = load("stories260K.gguf");
    QCOMPARE(m->config.n_ctx_train, 2048);
    EngineConfig cfg;
    cfg.block_size = 16;
    cfg.num_blocks = 64;  // 1024 slots: full attention could not hold 4096 tokens
    cfg.window = 128;
    cfg.sinks = 4;
    cfg.prefix_caching = true;
    cfg.sched.max_model_len = 4096;
    Engine engine(m, std::make_unique<CpuBackend>(m, 2), cfg);
    Request req;
    req.prompt = m->tokenizer->encode("Once upon a time, there was a little girl named Lily.", true, false);
    req.max_new_tokens = 4096 - static_cast<int32_t>(req.prompt.size());
    req.ignore_eos = true;
    req.record_logits = true;
    const SeqId id = engine.submit(req);
    int32_t peak = 0;
    while (engine.step()) peak = std::max(peak, engine.snapshot()->memory.blocks_used);
    const Sequence& s = engine.sequence(id);
    QCOMPARE(s.state, SeqState::Finished);
    QCOMPARE(s.total_len(), 4096);
    const int32_t bound = cfg.window / cfg.block_size + (cfg.sinks + cfg.block_size - 1) / cfg.block_size + 2;
    qInfo("generated %d tokens (trained context %d): peak KV blocks in use %d (bound %d)", s.total_len(),
          m->config.n_ctx_train, peak, bound);
    QVERIFY(peak <= bound);
    // Every step past the trained context still produced finite logits, and the text did not
    // collapse into one repeated token.
    const auto& rows = engine.recorded_logits(id);
    QCOMPARE(rows.size(), static_cast<size_t>(req.max_new_tokens));
    for (const auto& r : rows)
      for (float v : r) QVERIFY(std::isfinite(v));
    std::set<TokenId> late(s.output().end() - 512, s.output().end());
    qInfo("distinct tokens among the last 512 generated: %zu", late.size());
    QVERIFY(late.size() > 20);
  }
};

QTEST_APPLESS_MAIN(TestSinks)
#include "test_sinks.moc"
