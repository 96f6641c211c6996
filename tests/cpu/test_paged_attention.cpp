// The paged path (CpuBackend walking block tables) against the plain contiguous reference
// forward. Tolerance: 1e-3 absolute on logits, f32 weights and f32 KV (measured ~1e-5; the
// difference is only summation order and f32 vs f64 accumulation).
#include <QtTest>

#include <limits>
#include <numeric>
#include <random>

#include "cpu/paging_probe.h"
#include "paged_harness.h"
#include "reference_forward.h"
#include "test_support.h"

using namespace kvscope;

namespace {

constexpr float kTol = 1e-3f;

std::shared_ptr<Model> load(const std::string& rel) { return Model::load((test::models_dir() / rel).string()); }

std::vector<TokenId> random_tokens(int32_t n, int32_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> d(3, n_vocab - 1);
  std::vector<TokenId> t(static_cast<size_t>(n));
  t[0] = 1;
  for (int32_t i = 1; i < n; ++i) t[static_cast<size_t>(i)] = d(rng);
  return t;
}

// One sequence in a shared pool: its own shuffled blocks.
struct SeqPlacement {
  std::vector<BlockId> table;
  int64_t slot(int32_t pos, int32_t bs) const {
    return static_cast<int64_t>(table[static_cast<size_t>(pos / bs)]) * bs + pos % bs;
  }
};

}  // namespace

class TestPagedAttention : public QObject {
  Q_OBJECT
 private slots:
  void matches_reference_data() {
    QTest::addColumn<QString>("model");
    QTest::newRow("stories260K") << "stories260K.gguf";
    QTest::newRow("synth-llama") << "synthetic/synth-llama-f32.gguf";
    QTest::newRow("synth-qwen2") << "synthetic/synth-qwen2-f32.gguf";
    QTest::newRow("synth-qwen3") << "synthetic/synth-qwen3-f32.gguf";
    QTest::newRow("synth-gemma3 (sliding window layers)") << "synthetic/synth-gemma3-f32.gguf";
  }
  // Prompt as one batch, then single-token decode steps, for every block size and a random
  // placement of blocks, against the contiguous reference.
  void matches_reference() {
    QFETCH(QString, model);
    KVSCOPE_REQUIRE_FILE(test::models_dir() / model.toStdString());
    auto m = load(model.toStdString());
    const auto toks = random_tokens(70, m->config.n_vocab, 11);
    const size_t n_prompt = 45;
    test::ReferenceForward ref(m);
    std::vector<std::vector<float>> want;
    for (TokenId t : toks) want.push_back(ref.step(t));
    for (int32_t bs : {8, 16, 32, 64, 128}) {
      test::PagedRun run(m, 70, bs, 100 + bs);
      float worst = 0;
      auto got = run.feed(std::vector<TokenId>(toks.begin(), toks.begin() + n_prompt), 0);
      worst = std::max(worst, test::max_abs_diff(got, want[n_prompt - 1].data(), got.size()));
      for (size_t i = n_prompt; i < toks.size(); ++i) {
        got = run.feed({toks[i]}, static_cast<int32_t>(i));
        worst = std::max(worst, test::max_abs_diff(got, want[i].data(), got.size()));
      }
      qInfo("%s block_size %d: max |dlogit| %.3g", qPrintable(model), bs, worst);
      QVERIFY2(worst < kTol, qPrintable(QString("block size %1: %2").arg(bs).arg(worst)));
    }
  }

  // One batch holding a prefill chunk of sequence A, a decode of sequence B and a middle chunk
  // of sequence C, all interleaved in one shared pool.
  void mixed_batch_matches_reference() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "synthetic/synth-llama-f32.gguf");
    auto m = load("synthetic/synth-llama-f32.gguf");
    const int32_t bs = 8, n_blocks = 40;
    KvLayout L{m->config.n_layer, m->config.n_head_kv, m->config.head_dim, bs, n_blocks, KvDtype::F32};
    CpuBackend be(m, 2);
    be.init_kv(L, {});
    std::vector<BlockId> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937_64(5));
    SeqPlacement A{{perm.begin(), perm.begin() + 10}}, B{{perm.begin() + 10, perm.begin() + 20}},
        C{{perm.begin() + 20, perm.begin() + 30}};
    const auto ta = random_tokens(30, m->config.n_vocab, 1), tb = random_tokens(30, m->config.n_vocab, 2),
               tc = random_tokens(30, m->config.n_vocab, 3);
    test::ReferenceForward ra(m), rb(m), rc(m);
    std::vector<std::vector<float>> wa, wb, wc;
    for (int i = 0; i < 30; ++i)
      wa.push_back(ra.step(ta[i])), wb.push_back(rb.step(tb[i])), wc.push_back(rc.step(tc[i]));

    auto add = [&](BatchView& b, const SeqPlacement& s, const std::vector<TokenId>& t, int32_t from, int32_t to,
                   bool logits) {
      const int32_t si = static_cast<int32_t>(b.block_tables.size());
      b.block_tables.push_back(std::span<const BlockId>(s.table));
      for (int32_t p = from; p < to; ++p) {
        b.tokens.push_back(t[static_cast<size_t>(p)]);
        b.positions.push_back(p);
        b.slot_mapping.push_back(s.slot(p, bs));
        b.seq_index.push_back(si);
      }
      if (logits) b.logits_rows.push_back(b.n_tokens() - 1);
    };
    const size_t V = static_cast<size_t>(m->config.n_vocab);
    std::vector<float> logits(3 * V);
    {  // step 1: B and C prefill their first part
      BatchView b;
      add(b, B, tb, 0, 20, true);
      add(b, C, tc, 0, 9, false);
      be.forward(b, logits.data());
      QVERIFY(test::max_abs_diff(wb[19], logits.data(), V) < kTol);
    }
    {  // step 2: A prefills 17 tokens, B decodes position 20, C continues with 9..21
      BatchView b;
      add(b, A, ta, 0, 17, true);
      add(b, B, tb, 20, 21, true);
      add(b, C, tc, 9, 22, true);
      be.forward(b, logits.data());
      const float da = test::max_abs_diff(wa[16], logits.data(), V);
      const float db = test::max_abs_diff(wb[20], logits.data() + V, V);
      const float dc = test::max_abs_diff(wc[21], logits.data() + 2 * V, V);
      qInfo("mixed batch: A %.3g, B %.3g, C %.3g", da, db, dc);
      QVERIFY(da < kTol && db < kTol && dc < kTol);
    }
  }

  // Long contexts at the attention level: the paged path (rows of several blocks per kernel
  // call, prefetching the table's next blocks) against the contiguous kernel on the same K/V,
  // with prefetching forced on and off (the default switches it by size and cache, so the
  // machine must not decide which path is tested). Contexts that end mid-block and mid-chunk,
  // every block size, f32 and int8, sliding-window layers included.
  void long_context_matches_contiguous_data() {
    QTest::addColumn<QString>("model");
    QTest::newRow("synth-llama") << "synthetic/synth-llama-f32.gguf";
    QTest::newRow("synth-gemma3 (sliding window layers)") << "synthetic/synth-gemma3-f32.gguf";
  }
  void long_context_matches_contiguous() {
    QFETCH(QString, model);
    KVSCOPE_REQUIRE_FILE(test::models_dir() / model.toStdString());
    auto m = load(model.toStdString());
    for (KvDtype dt : {KvDtype::F32, KvDtype::INT8})
      for (int32_t bs : {8, 16, 64, 128})
        for (int32_t ctx : {1, 100, 3001}) {
          PagingProbe probe(m, ctx, bs, dt, 2, 7 + static_cast<uint64_t>(bs));
          std::vector<float> want(static_cast<size_t>(probe.q_dim())), got(want.size());
          for (int64_t threshold : {int64_t{0}, std::numeric_limits<int64_t>::max()}) {
            probe.backend().set_prefetch_threshold(threshold);
            probe.set_contiguous_prefetch(threshold == 0);  // both sides prefetching, or neither
            for (int32_t l = 0; l < probe.n_layer(); ++l) {
              probe.set_contiguous_head_major(l % 2 == 1);  // both contiguous layouts, same vectors
              probe.contiguous(l, want.data());
              probe.paged(l, got.data());
              const float diff = test::max_abs_diff(got, want.data(), want.size());
              QVERIFY2(diff < 1e-5f, qPrintable(QString("%1 bs %2 ctx %3 layer %4 prefetch %5: %6")
                                                    .arg(kv_dtype_name(dt))
                                                    .arg(bs)
                                                    .arg(ctx)
                                                    .arg(l)
                                                    .arg(threshold == 0 ? "on" : "off")
                                                    .arg(diff)));
            }
          }
        }
  }

  // The tile-stored 4/2-bit dtypes have no contiguous copy (the dtype-decode bench times their
  // paged path only): the probe says so, refuses contiguous(), and its paged attention over the
  // same random K/V stays near the f32 probe's (4-bit codes: a few percent of the output).
  void packed_dtype_probe_is_paged_only() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "synthetic/synth-gemma3-f32.gguf");
    auto m = load("synthetic/synth-gemma3-f32.gguf");
    PagingProbe ref(m, 300, 16, KvDtype::F32, 2, 3);
    std::vector<float> want(static_cast<size_t>(ref.q_dim())), got(want.size());
    for (KvDtype dt : {KvDtype::INT4, KvDtype::ROT4, KvDtype::ROT4C, KvDtype::KIVI4, KvDtype::KIVI2}) {
      PagingProbe probe(m, 300, 16, dt, 2, 3);
      QVERIFY(!probe.has_contiguous());
      QVERIFY_THROWS_EXCEPTION(std::logic_error, probe.contiguous(0, got.data()));
      for (int32_t l = 0; l < probe.n_layer(); ++l) {
        ref.paged(l, want.data());
        probe.paged(l, got.data());
        double num = 0, den = 0;
        for (size_t i = 0; i < want.size(); ++i) num += std::pow(got[i] - want[i], 2), den += std::pow(want[i], 2);
        const double rel = std::sqrt(num / den);
        QVERIFY2(rel > 0 && rel < (dt == KvDtype::KIVI2 ? 0.6 : 0.2),
                 qPrintable(QString("%1 layer %2: relative error %3").arg(kv_dtype_name(dt)).arg(l).arg(rel)));
      }
    }
  }

  // f16 KV is an approximation: it must stay close to f32 KV, not equal.
  void f16_kv_close_to_f32() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = load("stories260K.gguf");
    const auto toks = random_tokens(40, m->config.n_vocab, 9);
    test::PagedRun a(m, 40, 16, 1, KvDtype::F32), b(m, 40, 16, 1, KvDtype::F16);
    const auto la = a.feed(toks, 0), lb = b.feed(toks, 0);
    const float d = test::max_abs_diff(la, lb.data(), la.size());
    qInfo("f16 KV vs f32 KV: max |dlogit| %.3g", d);
    QVERIFY(d > 0.0f);
    QVERIFY(d < 0.1f);
  }
};

QTEST_APPLESS_MAIN(TestPagedAttention)
#include "test_paged_attention.moc"
