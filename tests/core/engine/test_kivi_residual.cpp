// KIVI's residual of R tokens (EngineConfig::kivi_residual): a full block stays in the f16 side
// table until R tokens of its sequence follow it. Checked here: the storage keeps a full block
// in f16 until completed (then the same codes as R = 0), releases drop an entry; the paged
// backend's attention reads the residual's blocks in f16 and older ones quantized, and
// quantizes each block at exactly the step R tokens follow it; a KIVI run that never completes
// a block reads what f16 KV reads; the prefix cache registers a block only once it is
// quantized; preemption, forks, finishing and window drops (one KV group and the hybrid two)
// leave no pending block behind and never let a shared (hashed) block be pending; exact peak
// residual bytes; config validation; and quality on stories260K (longer R, lower KL).
#include <QtTest>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <set>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_kv_storage.h"
#include "engine/config_validation.h"
#include "engine/engine.h"
#include "engine/kv_setup.h"
#include "gguf/ggml_types.h"
#include "kv/kv_cache_manager.h"
#include "paged_harness.h"
#include "run/perplexity.h"
#include "test_support.h"

using namespace kvscope;

namespace {

float f16r(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> N(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = N(rng);
  return v;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::shared_ptr<const Model> stories() { return Model::load((test::models_dir() / "stories260K.gguf").string()); }

std::vector<TokenId> story_tokens(const Model& m) {
  return m.tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play with her ball in the park. One day she saw a "
      "big dog. The dog was brown and it wanted to play too. Lily threw the ball and the dog ran after it. They played all "
      "day until the sun went down, and then Lily went home to eat dinner with her mom and dad.",
      true, false);
}

// A CPU backend that says it cannot keep a longer residual (as the CUDA backend does).
class NoResidualBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  bool supports_kivi_residual() const override { return false; }
};

// Steps `e` until idle; after every step, in every KV group: no block of the prefix cache is
// pending, no block with R tokens after it in a running sequence's table is pending, and a
// pending block that no running sequence holds is gone (or taken again) one step later.
struct PendingStats {
  int steps = 0, pending = 0, orphans = 0;
};
// (A void function with an out parameter: QFAIL returns.)
void step_checking_pending(Engine& e, int32_t bs, int32_t R, PendingStats& st) {
  auto& cpu = dynamic_cast<CpuBackend&>(e.backend());
  const int32_t n_groups = static_cast<int32_t>(cpu.kv_group_layouts().size());
  std::vector<std::set<BlockId>> orphans(static_cast<size_t>(n_groups));  // per group, after the last step
  while (e.step()) {
    ++st.steps;
    const SnapshotPtr S = e.snapshot();
    for (int32_t g = 0; g < n_groups; ++g) {
      const CpuKvStorage& kv = cpu.kv_storage(g);
      const int32_t n_layer = kv.layout().n_layer;
      std::set<BlockId> held;
      for (const SeqSnap& q : S->seqs) {
        if (q.state != SeqState::Running) continue;
        const std::vector<BlockId>& table = q.group_table(g);
        for (size_t bi = 0; bi < table.size(); ++bi) {
          const BlockId b = table[bi];
          if (b == kNoBlock) continue;
          held.insert(b);
          if (static_cast<int32_t>(bi + 1) * bs <= q.num_computed - R)
            for (int32_t l = 0; l < n_layer; ++l)
              if (kv.block_pending(l, b)) { QFAIL("a block R tokens old is still in f16"); }
        }
      }
      std::set<BlockId> now_orphans;
      const std::vector<BlockSnap>& blocks = S->group_blocks(g);
      for (BlockId b = 0; b < static_cast<BlockId>(blocks.size()); ++b)
        for (int32_t l = 0; l < n_layer; ++l) {
          if (!kv.block_pending(l, b)) continue;
          ++st.pending;
          if (blocks[static_cast<size_t>(b)].hashed) { QFAIL("a block in the prefix cache is still pending"); }
          if (held.contains(b)) continue;
          if (orphans[static_cast<size_t>(g)].contains(b)) {
            QFAIL("a pending block outlived its sequences by more than a step");
          }
          now_orphans.insert(b);
        }
      st.orphans += static_cast<int>(now_orphans.size());
      orphans[static_cast<size_t>(g)] = std::move(now_orphans);
    }
  }
}

}  // namespace

class TestKiviResidual : public QObject {
  Q_OBJECT

 private slots:
  // A full block with R > 0 stays in the residual (read back as f16) until complete_block; then
  // it holds exactly the codes R = 0 writes at the last slot. release_block drops an entry.
  void storage_keeps_full_block_until_completed() {
    const int32_t d = 16, bs = 8, H = 2;
    KvLayout L{2, H, d, bs, 4, KvDtype::KIVI4};
    L.quant_group = 8;
    CpuKvStorage now, later;
    now.init(L);
    L.kivi_residual = 16;
    later.init(L);
    std::mt19937 rng(3);
    const std::vector<float> K = randn(static_cast<size_t>(bs) * d, rng), V = randn(K.size(), rng);
    for (CpuKvStorage* st : {&now, &later})
      for (int32_t l = 0; l < 2; ++l)
        for (int32_t s = 0; s < bs; ++s)
          for (int32_t h = 0; h < H; ++h) {
            st->store(l, false, int64_t{1} * bs + s, h, &K[static_cast<size_t>(s) * d]);
            st->store(l, true, int64_t{1} * bs + s, h, &V[static_cast<size_t>(s) * d]);
          }
    const int64_t one_block = int64_t{H} * 2 * bs * d * 2;  // K and V, f16, per layer
    QVERIFY(!now.block_pending(0, 1) && now.residual_bytes() == 0);
    QVERIFY(later.block_pending(0, 1) && later.block_pending(1, 1));
    QCOMPARE(later.residual_bytes(), 2 * one_block);
    std::vector<float> a(static_cast<size_t>(bs) * d), b(a.size());
    const float* k = later.load_rows(0, false, 1, 1, 0, bs, a.data());
    for (int32_t i = 0; i < bs * d; ++i) QCOMPARE(k[i], f16r(K[static_cast<size_t>(i)]));
    later.complete_block(0, 1);
    QVERIFY(!later.block_pending(0, 1) && later.block_pending(1, 1));
    QCOMPARE(later.residual_bytes(), one_block);
    for (bool is_v : {false, true})
      for (int32_t h = 0; h < H; ++h) {
        const float* x = now.load_rows(0, is_v, 1, h, 0, bs, a.data());
        const float* y = later.load_rows(0, is_v, 1, h, 0, bs, b.data());
        QVERIFY(std::memcmp(x, y, sizeof(float) * static_cast<size_t>(bs * d)) == 0);
      }
    later.release_block(1);  // layer 1's entry goes too
    QVERIFY(!later.block_pending(1, 1));
    QCOMPARE(later.residual_bytes(), int64_t{0});
    QCOMPARE(later.peak_residual_bytes(), 2 * one_block);
    later.release_block(3);  // nothing there: no-op
  }

  // Fed token by token through the paged backend (stories260K, blocks of 8, R = 16): after each
  // step of length n, block i is quantized in every layer exactly when (i + 1) * 8 <= n - 16,
  // i.e. once it is no longer among the 16 newest tokens.
  void quantized_at_exactly_the_right_step() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = stories();
    const std::vector<TokenId> toks = story_tokens(*m);
    const int32_t bs = 8, R = 16, n_layer = m->config.n_layer;
    test::PagedRun run(m, static_cast<int32_t>(toks.size()), bs, 7, KvDtype::KIVI4);
    KvLayout L = run.backend->kv_layout();
    L.kivi_residual = R;
    run.backend->init_kv(L, {});
    CpuKvStorage& kv = run.backend->kv_storage();
    const int32_t prompt = 13;
    run.feed(std::vector<TokenId>(toks.begin(), toks.begin() + prompt), 0);
    int checked_final = 0;
    for (int32_t n = prompt; n <= static_cast<int32_t>(toks.size()); ++n) {
      if (n > prompt) run.feed({toks[static_cast<size_t>(n - 1)]}, n - 1);
      for (int32_t bi = 0; bi * bs < n; ++bi) {
        const bool final_now = (bi + 1) * bs <= n - R;
        checked_final += final_now ? 1 : 0;
        for (int32_t l = 0; l < n_layer; ++l)
          QVERIFY2(kv.block_pending(l, run.table[static_cast<size_t>(bi)]) == !final_now,
                   qPrintable(QString("block %1 layer %2 at length %3").arg(bi).arg(l).arg(n)));
      }
    }
    QVERIFY(checked_final > 50);  // the walk was exercised well past the residual
  }

  // The paged backend's attention (layer 0 of stories260K: 8 query heads over 4 KV heads,
  // head_dim 8) over 45 stored random tokens in 8-token blocks with R = 16, the blocks ending at
  // or before 45 - 16 completed as the backend does: equal to a reference computed here in
  // double from f16-rounded K/V for the blocks within the residual (tokens 24..44) and from a
  // separate R = 0 storage's quantized rows for the older ones; and visibly not equal to the
  // reference where every full block is quantized.
  void attention_reads_recent_blocks_in_f16() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = stories();
    const ModelConfig& c = m->config;
    const int32_t d = c.head_dim, Hkv = c.n_head_kv, nq = c.n_head / c.n_head_kv, bs = 8, n = 45, R = 16;
    KvLayout L{c.n_layer, Hkv, d, bs, 8, KvDtype::KIVI4};
    CpuBackend be(m, 1);
    L.kivi_residual = R;
    be.init_kv(L, {});
    CpuKvStorage zero;  // R = 0: each block quantized at its last slot
    L.kivi_residual = 0;
    zero.init(L);
    const std::vector<BlockId> table = {5, 2, 7, 0, 3, 6};
    std::mt19937 rng(9);
    const std::vector<float> K = randn(static_cast<size_t>(n) * Hkv * d, rng), V = randn(K.size(), rng);
    auto at = [&](const std::vector<float>& X, int32_t p, int32_t g) {
      return &X[(static_cast<size_t>(p) * Hkv + g) * d];
    };
    for (int32_t p = 0; p < n; ++p) {
      const int64_t slot = int64_t{table[static_cast<size_t>(p / bs)]} * bs + p % bs;
      for (int32_t g = 0; g < Hkv; ++g)
        for (CpuKvStorage* st : {&be.kv_storage(), &zero}) {
          st->store(0, false, slot, g, at(K, p, g));
          st->store(0, true, slot, g, at(V, p, g));
        }
    }
    for (int32_t bi = 0; (bi + 1) * bs <= n - R; ++bi)
      be.kv_storage().complete_block(0, table[static_cast<size_t>(bi)]);
    // K/V as the reference reads them: block bi quantized (from `zero`) when bi < quantized_below.
    auto reference = [&](const std::vector<float>& q, int32_t quantized_below) {
      std::vector<double> out(static_cast<size_t>(c.n_head) * d, 0.0);
      std::vector<float> kr(static_cast<size_t>(d)), vr(kr.size());
      for (int32_t h = 0; h < c.n_head; ++h) {
        const int32_t g = h / nq;
        std::vector<double> w(static_cast<size_t>(n));
        std::vector<std::vector<float>> vals(static_cast<size_t>(n));
        double mx = -1e300;
        for (int32_t p = 0; p < n; ++p) {
          const int32_t bi = p / bs;
          const float *k = kr.data(), *v = vr.data();
          if (bi < quantized_below) {
            k = zero.load_rows(0, false, table[static_cast<size_t>(bi)], g, p % bs, 1, kr.data());
            v = zero.load_rows(0, true, table[static_cast<size_t>(bi)], g, p % bs, 1, vr.data());
          } else {
            for (int32_t i = 0; i < d; ++i)
              kr[static_cast<size_t>(i)] = f16r(at(K, p, g)[i]), vr[static_cast<size_t>(i)] = f16r(at(V, p, g)[i]);
          }
          double dot = 0;
          for (int32_t i = 0; i < d; ++i) dot += static_cast<double>(q[static_cast<size_t>(h * d + i)]) * k[i];
          w[static_cast<size_t>(p)] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, w[static_cast<size_t>(p)]);
          vals[static_cast<size_t>(p)].assign(v, v + d);
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int32_t p = 0; p < n; ++p)
          for (int32_t i = 0; i < d; ++i)
            out[static_cast<size_t>(h * d + i)] +=
                w[static_cast<size_t>(p)] / sum * vals[static_cast<size_t>(p)][static_cast<size_t>(i)];
      }
      return out;
    };
    const std::vector<float> q = randn(static_cast<size_t>(c.n_head) * d, rng);
    BatchView b;
    b.tokens = {1};
    b.positions = {n - 1};
    b.slot_mapping = {int64_t{table.back()} * bs + (n - 1) % bs};
    b.seq_index = {0};
    b.block_tables.push_back(std::span<const BlockId>(table));
    b.logits_rows = {0};
    std::vector<float> out(q.size());
    be.attention(0, b, q.data(), out.data());
    auto max_err = [&](const std::vector<double>& want) {
      double e = 0;
      for (size_t i = 0; i < out.size(); ++i) e = std::max(e, std::fabs(out[i] - want[i]));
      return e;
    };
    const double mixed = max_err(reference(q, (n - R) / bs)), all = max_err(reference(q, n / bs));
    qInfo("max |attention - reference|: blocks 0-2 quantized, 3-5 f16 %.3g; blocks 0-4 quantized %.3g", mixed, all);
    QVERIFY(mixed < 1e-5);
    QVERIFY(all > 100 * mixed && all > 1e-3);
  }

  // With R longer than the text no block is ever quantized, so every key and value is read from
  // the f16 residual: the logits equal those of f16 KV (the same f16 values, decoded exactly).
  // This is the read path of a full block still in the residual, end to end.
  void never_quantized_reads_like_f16() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = stories();
    const std::vector<TokenId> toks = story_tokens(*m);
    const std::vector<TokenId> prompt(toks.begin(), toks.begin() + 20), forced(toks.begin() + 20, toks.end());
    test::PagedRun f16(m, static_cast<int32_t>(toks.size()), 8, 1, KvDtype::F16);
    const auto want = f16.teacher_forced(prompt, forced, forced.size() + 1);
    for (KvDtype t : {KvDtype::KIVI4, KvDtype::KIVI2}) {
      test::PagedRun run(m, static_cast<int32_t>(toks.size()), 8, 1, t);
      KvLayout L = run.backend->kv_layout();
      L.kivi_residual = 4096;
      run.backend->init_kv(L, {});
      const auto got = run.teacher_forced(prompt, forced, forced.size() + 1);
      const LogitsAgreement ag = compare_logits(want, got);
      qInfo("%s with R beyond the text vs f16 KV: KL max %.3g", kv_dtype_name(t), ag.kl_max);
      QVERIFY(ag.kl_max < 1e-9);
      QCOMPARE(ag.top1, 1.0);
      // The quantizing run (R = 0) is visibly different, so the comparison above can fail.
      test::PagedRun q(m, static_cast<int32_t>(toks.size()), 8, 1, t);
      QVERIFY(compare_logits(want, q.teacher_forced(prompt, forced, forced.size() + 1)).kl_mean > 1e-5);
    }
  }

  // The prefix cache with a register lag of R: a full block is registered (found by others)
  // only once R tokens follow it; freed blocks outside the prefix cache are reported once.
  void prefix_cache_registers_only_final_blocks() {
    KvCacheConfig c;
    c.block_size = 8;
    c.num_blocks = 16;
    c.register_lag = 16;
    c.report_released = true;
    KvCacheManager kv(c);
    std::vector<TokenId> toks(64);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<TokenId>(100 + i);
    QVERIFY(kv.allocate_slots(1, toks, 24));  // 3 full blocks, the newest 16 tokens span 2 of them
    QCOMPARE(kv.peek_cached_prefix(std::span(toks).first(40)), 8);
    QVERIFY(kv.allocate_slots(1, toks, 5));  // 29: still only block 0 has 16 tokens after it
    QCOMPARE(kv.peek_cached_prefix(std::span(toks).first(40)), 8);
    QVERIFY(kv.allocate_slots(1, toks, 3));  // 32: block 1 too
    QCOMPARE(kv.peek_cached_prefix(std::span(toks).first(40)), 16);
    kv.validate();
    // A second sequence attaches the two final blocks and extends past them: its own blocks
    // follow the same rule (the lagged range reaches back over the hits, which it skips).
    QCOMPARE(kv.attach_cached_prefix(2, std::span(toks).first(40)), 16);
    QVERIFY(kv.allocate_slots(2, toks, 24));                         // 40
    QCOMPARE(kv.peek_cached_prefix(std::span(toks).first(48)), 24);  // blocks 0-2 of either sequence
    kv.validate();
    QVERIFY(kv.take_released_blocks().empty());
    // Sequence 2 ends: its blocks 3 and 4 were never registered and nobody else holds them.
    const std::vector<BlockId> t2(kv.block_table(2).begin(), kv.block_table(2).end());
    kv.free(2);
    std::set<BlockId> released;
    for (const BlockRelease& r : kv.take_released_blocks()) released.insert(r.block);
    QCOMPARE(released, (std::set<BlockId>{t2[3], t2[4]}));
    // Fork: the child shares everything; freeing the parent releases nothing yet.
    kv.fork(1, 3);
    kv.free(1);
    QVERIFY(kv.take_released_blocks().empty());
    kv.free(3);
    QCOMPARE(kv.take_released_blocks().size(), size_t{2});  // blocks 2 and 3 (0 and 1 stay cached)
    kv.validate();
  }

  // The engine over preemption (a small pool), parallel samples (fork + copy on write) and
  // requests finishing mid-block, kivi4 with R = 16: after every step no block of the prefix
  // cache is pending (a block is shared only once final), every block with R tokens after it
  // in a running sequence's table is final, and a pending block no running sequence holds (its
  // sequence ended or was preempted) is gone or taken again after the next step (the release
  // comes with the next step's forward), so none lingers.
  void engine_pending_blocks_follow_the_sequences() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = stories();
    const std::vector<TokenId> toks = story_tokens(*m);
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 24;
    cfg.kv_dtype = KvDtype::KIVI4;
    cfg.kivi_residual = 16;
    cfg.sched.max_batched_tokens = 32;
    Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
    Request r;
    r.prompt.assign(toks.begin(), toks.begin() + 30);
    r.max_new_tokens = 40;
    r.ignore_eos = true;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = 11;
    e.submit_parallel(r, 2);  // forks after the prompt, the partial last block copied on write
    for (int i = 0; i < 3; ++i) {
      Request s = r;
      s.prompt.assign(toks.begin() + i, toks.begin() + 25 + 3 * i);
      s.max_new_tokens = 20 + 7 * i;
      e.submit(s);
    }
    PendingStats st;
    step_checking_pending(e, 8, 16, st);
    const int steps = st.steps, pending_seen = st.pending, orphans_seen = st.orphans;
    QVERIFY(S_preempted(e) > 0);  // the pool was small enough to preempt
    QVERIFY(pending_seen > 0 && steps > 40);
    qInfo("%d steps, %d pending (block, layer) seen, %d freed while pending", steps, pending_seen, orphans_seen);
    QVERIFY(orphans_seen > 0);  // sequences did end or get preempted with blocks in f16
  }

  // The same rules on the hybrid KV cache (the synthetic gemma3: a global group and a sliding
  // group with window 32), R = 40 > the window, so sliding blocks leave the window (dropped,
  // released) while still pending; the prefix cache on, a repeated prompt hitting it.
  void hybrid_groups_follow_the_same_rules() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "synthetic/synth-gemma3-f32.gguf");
    auto m = Model::load((test::models_dir() / "synthetic/synth-gemma3-f32.gguf").string());
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.kv_dtype = KvDtype::KIVI4;
    cfg.kivi_residual = 40;
    cfg.sched.max_batched_tokens = 32;
    Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
    QVERIFY(e.hybrid_kv() != nullptr);
    Request r;
    for (int i = 0; i < 70; ++i) r.prompt.push_back(static_cast<TokenId>(1 + (i * 37) % 500));
    r.max_new_tokens = 50;
    r.ignore_eos = true;
    e.submit(r);
    e.submit_parallel(r, 2);
    PendingStats st;
    step_checking_pending(e, 8, 40, st);
    qInfo("%d steps, %d pending (block, layer) seen, %d freed while pending", st.steps, st.pending, st.orphans);
    QVERIFY(st.pending > 0 && st.orphans > 0);
    QVERIFY(e.snapshot()->counters.prefix_hits_tokens > 0);
  }

  // peak_residual_bytes, exactly: fed one token per step, a layer holds at most R / bs full
  // blocks plus the one being filled in f16 (R a multiple of bs), so the peak is that many
  // blocks in every layer; the blocks held (peak_kv_bytes minus the residual) do not change.
  void residual_bytes_exact() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = stories();
    const std::vector<TokenId> toks = story_tokens(*m);
    const ModelConfig& c = m->config;
    const int64_t block =
        int64_t{c.n_layer} * c.n_head_kv * kv_residual_bytes_per_block_head(KvDtype::KIVI4, c.head_dim, 16);
    EvalConfig cfg;
    cfg.kv_dtype = KvDtype::KIVI4;
    cfg.block_size = 16;
    cfg.chunk = 1;
    cfg.threads = 2;
    const EvalRun r0 = eval_text(m, toks, cfg);
    cfg.kivi_residual = 32;
    const EvalRun r32 = eval_text(m, toks, cfg);
    QVERIFY(toks.size() > 3 * 16 + 32);
    QCOMPARE(r0.peak_residual_bytes, block);
    QCOMPARE(r32.peak_residual_bytes, 3 * block);
    QCOMPARE(r32.peak_kv_bytes - r32.peak_residual_bytes, r0.peak_kv_bytes - r0.peak_residual_bytes);
    QCOMPARE(r32.kv_bytes_per_token, r0.kv_bytes_per_token);  // per token: the blocks' codes only
    cfg.kv_dtype = KvDtype::INT8;                             // a list's non-KIVI entry runs without it (no error)
    QCOMPARE(eval_text(m, toks, cfg).peak_residual_bytes, int64_t{0});
  }

  // Values the setting cannot take, and a backend that cannot keep the residual, are refused
  // with the reason.
  void config_validation() {
    ModelConfig mc;
    mc.head_dim = 8;
    mc.n_ctx_train = 512;
    EngineConfig cfg;
    cfg.kv_dtype = KvDtype::KIVI4;
    auto problems = [&] { return describe_problems(validate(cfg, mc)); };
    cfg.kivi_residual = 128;
    QVERIFY(problems().empty());
    cfg.kivi_residual = -1;
    QVERIFY(problems().find("KIVI residual must be >= 0") != std::string::npos);
    cfg.kivi_residual = 2048;  // max_model_len's default
    QVERIFY2(problems().find("smaller than the context (2048 tokens)") != std::string::npos, problems().c_str());
    cfg.sched.max_model_len = 4096;
    QVERIFY(problems().empty());
    cfg.sched.max_model_len = 0;  // the model's own context
    QVERIFY(problems().find("smaller than the context (512 tokens)") != std::string::npos);
    cfg.kivi_residual = 64;
    cfg.kv_dtype = KvDtype::INT4;
    QVERIFY(
        problems().find("applies to --kv-dtype kivi4, kivi2 or rot4c only (formats quantized per block), not int4") !=
        std::string::npos);
    cfg.kv_dtype = KvDtype::KIVI2;
    cfg.contiguous_baseline = true;
    QVERIFY(problems().find("needs the paged cache") != std::string::npos);
    cfg.contiguous_baseline = false;
    cfg.kivi_residual = 0;
    cfg.kv_dtype = KvDtype::F16;
    QVERIFY(problems().empty());  // 0 is every dtype's default

    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = stories();
    EngineConfig ec;
    ec.kv_dtype = KvDtype::KIVI4;
    ec.kivi_residual = 32;
    ec.num_blocks = 16;
    try {
      Engine e(m, std::make_unique<NoResidualBackend>(m, 1), ec);
      QFAIL("a backend without the residual accepted it");
    } catch (const std::invalid_argument& ex) {
      QVERIFY(std::string(ex.what()).find("no --kivi-residual") != std::string::npos);
    }
    ec.kivi_residual = 0;
    Engine ok(m, std::make_unique<NoResidualBackend>(m, 1), ec);  // R = 0 needs nothing new
    QCOMPARE(ok.snapshot()->kivi_residual, 0);
    ec.kivi_residual = 32;
    Engine cpu(m, std::make_unique<CpuBackend>(m, 1), ec);
    QCOMPARE(cpu.snapshot()->kivi_residual, 32);
  }

  // Quality on stories260K (the first 400 tokens of resources/texts/long-story.txt, blocks of
  // 16): KL against f32 KV for R = 0, 16, 64 must fall at each step by at least 10%. Measured
  // (printed): kivi4 7.9e-4, 2.7e-4, 1.0e-4; kivi2 0.044, 0.016, 0.0028: each step 2.7x or more,
  // so the margin is far from the noise. docs/kv-compression.md's full-text numbers go the same way.
  void longer_residual_lowers_kl() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto m = stories();
    const std::string text = read_file(test::source_dir() / "resources/texts/long-story.txt");
    std::vector<TokenId> toks = m->tokenizer->encode(text, true, false);
    toks.resize(std::min<size_t>(toks.size(), 400));
    EvalConfig cfg;
    cfg.block_size = 16;
    cfg.threads = 2;
    const EvalRun ref = eval_text(m, toks, cfg);
    for (KvDtype t : {KvDtype::KIVI4, KvDtype::KIVI2}) {
      cfg.kv_dtype = t;
      double kl[3];
      const int32_t Rs[3] = {0, 16, 64};
      for (int i = 0; i < 3; ++i) {
        cfg.kivi_residual = Rs[i];
        kl[i] = compare_logits(ref.logits, eval_text(m, toks, cfg).logits).kl_mean;
      }
      qInfo("%s: KL mean R=0 %.4g, R=16 %.4g, R=64 %.4g", kv_dtype_name(t), kl[0], kl[1], kl[2]);
      QVERIFY(kl[1] < 0.9 * kl[0]);
      QVERIFY(kl[2] < 0.9 * kl[1]);
    }
  }

 private:
  static uint64_t S_preempted(Engine& e) { return e.snapshot()->counters.preemptions; }
};

QTEST_APPLESS_MAIN(TestKiviResidual)
#include "test_kivi_residual.moc"
