// The hybrid KV cache (kv/hybrid_kv_manager.h): a Gemma-3-like model keeps two KV groups, the
// global layers' blocks and the sliding layers' blocks, each with its own pool and tables.
// (1) the logits are those of the single-table path (same math, other storage) and of the
//     reference forward; (2) the sliding group holds at most ceil(W / bs) + 1 blocks per decoding
//     sequence, so the KV bytes fall by the computed factor; (3) both managers' invariants hold
//     through random allocate / append / fork / free / cancel / preemption in small pools;
//     (4) prefix caching across chat turns still hits, and a hit is what BOTH groups hold.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "kv/hybrid_kv_manager.h"
#include "kv/hybrid_pool_split.h"
#include "model/synthetic_model.h"
#include "reference_forward.h"
#include "test_support.h"

using namespace kvscope;

namespace {

constexpr int32_t kWindow = 12;  // the synthetic model's own sliding window

// 4 layers, pattern 3: layers 0, 1 and 3 slide (window 12), layer 2 is global.
std::shared_ptr<Model> small_gemma3() {
  static std::shared_ptr<Model> m = [] {
    SyntheticSpec s;
    s.arch = "gemma3";
    s.n_vocab = 300;
    s.n_embd = 128;
    s.n_layer = 4;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 256;
    s.n_ctx = 1024;
    s.sliding_window = kWindow;
    s.swa_pattern = 3;
    s.seed = 7;
    const auto path = (test::tmp_dir() / "hybrid-kv-gemma3.gguf").string();
    write_synthetic_model(s, path);
    return Model::load(path);
  }();
  return m;
}

std::vector<TokenId> prompt_of(int32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> p = {1};
  while (static_cast<int32_t>(p.size()) < n) p.push_back(static_cast<TokenId>(3 + rng() % 290));
  return p;
}

struct Run {
  std::vector<std::vector<TokenId>> outputs;
  std::vector<std::vector<std::vector<float>>> logits;         // [seq][sampling step][vocab]
  std::vector<std::vector<std::vector<float>>> prompt_logits;  // [seq][prompt position][vocab]
  uint64_t preemptions = 0;
  bool hybrid = false;
};

Run run_engine(EngineConfig cfg, const std::vector<std::vector<TokenId>>& prompts, int32_t n_new) {
  auto m = small_gemma3();
  Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
  std::vector<SeqId> ids;
  for (const auto& p : prompts) {
    Request r;
    r.prompt = p;
    r.max_new_tokens = n_new;
    r.ignore_eos = true;
    r.record_logits = true;
    r.record_prompt_logits = true;
    ids.push_back(e.submit(r));
  }
  while (e.step()) e.validate_kv();
  Run out;
  out.hybrid = e.hybrid_kv() != nullptr;
  out.preemptions = e.snapshot()->counters.preemptions;
  for (SeqId id : ids) {
    if (e.sequence(id).state != SeqState::Finished)
      throw std::runtime_error("sequence did not finish: " + e.sequence(id).error);
    out.outputs.push_back(e.sequence(id).output_tokens());
    out.logits.push_back(e.recorded_logits(id));
    out.prompt_logits.push_back(e.recorded_prompt_logits(id));
  }
  return out;
}

// max |a - b| / max |b| over every row of every sequence.
double max_rel_diff(const std::vector<std::vector<std::vector<float>>>& a,
                    const std::vector<std::vector<std::vector<float>>>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    if (a[s].size() != b[s].size()) return INFINITY;
    for (size_t r = 0; r < a[s].size(); ++r) {
      double num = 0, den = 1e-30;
      for (size_t i = 0; i < a[s][r].size(); ++i) {
        num = std::max(num, static_cast<double>(std::abs(a[s][r][i] - b[s][r][i])));
        den = std::max(den, static_cast<double>(std::abs(b[s][r][i])));
      }
      worst = std::max(worst, num / den);
    }
  }
  return worst;
}

int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

}  // namespace

class TestHybridKv : public QObject {
  Q_OBJECT
 private slots:
  void the_model_mixes_layer_kinds() {
    const ModelConfig& c = small_gemma3()->config;
    QVERIFY(c.layer_is_swa(0) && c.layer_is_swa(1) && !c.layer_is_swa(2) && c.layer_is_swa(3));
    QCOMPARE(c.sliding_window, kWindow);
  }

  // (1) Several sequences, long against the window, chunked prefill, several block sizes and a
  // user window with sinks on top: hybrid logits == single-table logits (1e-5 relative; the
  // math is the same, only where K/V live differs) and, without a user window, == reference.
  void logits_match_single_table_and_reference_data() {
    QTest::addColumn<int>("bs");
    QTest::addColumn<int>("window");
    QTest::addColumn<int>("sinks");
    QTest::addColumn<int>("chunk");
    QTest::newRow("bs8") << 8 << 0 << 0 << 24;
    QTest::newRow("bs16") << 16 << 0 << 0 << 40;
    QTest::newRow("bs32") << 32 << 0 << 0 << 17;
    QTest::newRow("bs16 user window 40 + 4 sinks") << 16 << 40 << 4 << 24;
    QTest::newRow("bs8 user window 8 (inside the model's)") << 8 << 8 << 0 << 24;
  }
  void logits_match_single_table_and_reference() {
    QFETCH(int, bs);
    QFETCH(int, window);
    QFETCH(int, sinks);
    QFETCH(int, chunk);
    const std::vector<std::vector<TokenId>> prompts = {prompt_of(70, 1), prompt_of(93, 2), prompt_of(41, 3)};
    EngineConfig cfg;
    cfg.block_size = bs;
    cfg.num_blocks = 200;
    cfg.window = window;
    cfg.sinks = sinks;
    cfg.sched.max_batched_tokens = chunk;
    cfg.hybrid_kv = HybridKvMode::On;
    const Run hybrid = run_engine(cfg, prompts, 24);
    cfg.hybrid_kv = HybridKvMode::Off;
    const Run single = run_engine(cfg, prompts, 24);
    QVERIFY(hybrid.hybrid);
    QVERIFY(!single.hybrid);
    QCOMPARE(hybrid.outputs, single.outputs);
    const double d_prompt = max_rel_diff(hybrid.prompt_logits, single.prompt_logits);
    const double d_gen = max_rel_diff(hybrid.logits, single.logits);
    QVERIFY2(d_prompt <= 1e-5 && d_gen <= 1e-5,
             qPrintable(QString("rel diff prompt %1 gen %2").arg(d_prompt).arg(d_gen)));
    if (window > 0) return;  // the reference's sink mode is covered by test_sinks

    // The reference forward, teacher-forced along the second (longest) sequence.
    test::ReferenceForward ref(small_gemma3());
    std::vector<TokenId> all = prompts[1];
    all.insert(all.end(), hybrid.outputs[1].begin(), hybrid.outputs[1].end());
    float worst = 0;
    for (size_t i = 0; i + 1 < all.size(); ++i) {
      const std::vector<float> lr = ref.step(all[i]);
      const std::vector<float>& lh =
          i + 1 < prompts[1].size() ? hybrid.prompt_logits[1][i] : hybrid.logits[1][i + 1 - prompts[1].size()];
      for (size_t v = 0; v < lr.size(); ++v) worst = std::max(worst, std::abs(lr[v] - lh[v]));
    }
    QVERIFY2(worst < 1e-3f, qPrintable(QString("hybrid vs reference: max abs diff %1").arg(worst)));
  }

  // The shared synthetic gemma3 (the golden test's model) runs hybrid by default.
  void auto_mode_turns_hybrid_on_for_gemma3_only() {
    auto g = Model::load((test::models_dir() / "synthetic/synth-gemma3-f32.gguf").string());
    Engine eg(g, std::make_unique<CpuBackend>(g, 1), EngineConfig{});
    QVERIFY(eg.hybrid_kv() != nullptr);
    QVERIFY(eg.kv_summary().find("global") != std::string::npos &&
            eg.kv_summary().find("sliding") != std::string::npos);
    auto l = Model::load((test::models_dir() / "synthetic/synth-llama-f32.gguf").string());
    Engine el(l, std::make_unique<CpuBackend>(l, 1), EngineConfig{});
    QVERIFY(el.hybrid_kv() == nullptr);
    EngineConfig on;
    on.hybrid_kv = HybridKvMode::On;
    try {
      Engine bad(l, std::make_unique<CpuBackend>(l, 1), on);
      QFAIL("a llama model cannot use the hybrid KV cache");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(std::string(e.what()).find("does not mix sliding-window and global") != std::string::npos, e.what());
    }
    EngineConfig base;
    base.contiguous_baseline = true;
    Engine ec(g, std::make_unique<CpuBackend>(g, 1), base);  // auto: the baseline stays single-table
    QVERIFY(ec.hybrid_kv() == nullptr);
  }

  // (2) One long sequence: every step, the sliding group holds at most ceil(W / bs) + 1 blocks
  // once decoding (ceil((W - 1 + chunk) / bs) + 1 during a prefill chunk) while the global
  // group holds ceil(len / bs); the used KV bytes are exactly that, and the single-table path
  // at the same length uses ceil(len / bs) blocks of all layers.
  void sliding_blocks_stay_bounded_and_bytes_fall() {
    const int32_t bs = 8, chunk = 16, n_new = 220;
    const std::vector<TokenId> prompt = prompt_of(60, 9);
    auto m = small_gemma3();
    EngineConfig cfg;
    cfg.block_size = bs;
    cfg.num_blocks = 100;
    cfg.sched.max_batched_tokens = chunk;
    Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
    EngineConfig single_cfg = cfg;
    single_cfg.hybrid_kv = HybridKvMode::Off;
    Engine s(m, std::make_unique<CpuBackend>(m, 2), single_cfg);
    QVERIFY(e.hybrid_kv() && !s.hybrid_kv());
    Request r;
    r.prompt = prompt;
    r.max_new_tokens = n_new;
    r.ignore_eos = true;
    const SeqId id = e.submit(r);
    QCOMPARE(s.submit(r), id);
    const auto G = e.backend().kv_group_layouts();
    QCOMPARE(G.size(), size_t(2));
    QCOMPARE(G[0].n_layer, 1);
    QCOMPARE(G[1].n_layer, 3);
    const int64_t per_tok_all = s.backend().kv_layout().bytes_per_token();
    QCOMPARE(G[0].bytes_per_token() + G[1].bytes_per_token(), per_tok_all);
    const KvCacheManager& global = e.hybrid_kv()->group(HybridKvManager::kGlobal);
    const KvCacheManager& sliding = e.hybrid_kv()->group(HybridKvManager::kSliding);
    double last_ratio = 1;
    int decode_steps = 0;
    while (e.step()) {
      QVERIFY(s.step());
      e.validate_kv();
      if (e.sequence(id).state != SeqState::Running) break;
      const int32_t len = e.hybrid_kv()->seq_len(id);
      const bool decoding = len > static_cast<int32_t>(prompt.size());
      const int32_t bound = decoding ? ceil_div(kWindow, bs) + 1 : ceil_div(kWindow - 1 + chunk, bs) + 1;
      const int32_t held = sliding.blocks_held(id);
      QVERIFY2(held <= bound, qPrintable(QString("len %1: %2 sliding blocks > %3").arg(len).arg(held).arg(bound)));
      QCOMPARE(global.blocks_held(id), ceil_div(len, bs));
      const int64_t expect_hybrid = static_cast<int64_t>(ceil_div(len, bs)) * bs * G[0].bytes_per_token() +
                                    static_cast<int64_t>(held) * bs * G[1].bytes_per_token();
      const int64_t expect_single = static_cast<int64_t>(ceil_div(len, bs)) * bs * per_tok_all;
      QCOMPARE(e.snapshot()->memory.kv_used_bytes, expect_hybrid);
      QCOMPARE(s.snapshot()->memory.kv_used_bytes, expect_single);
      last_ratio = static_cast<double>(expect_hybrid) / static_cast<double>(expect_single);
      if (decoding) ++decode_steps;
    }
    QVERIFY(decode_steps > 200);
    // At 280 tokens: 1/4 of the layers keep everything, 3/4 keep 2-3 blocks of 8.
    const double expect = 0.25 + 0.75 * (3.0 * bs) / (ceil_div(279, bs) * bs);
    QVERIFY2(last_ratio <= expect + 1e-9 && last_ratio < 0.35,
             qPrintable(QString("ratio %1, expected <= %2").arg(last_ratio).arg(expect)));
    QCOMPARE(e.sequence(id).output_tokens(), s.sequence(id).output_tokens());
  }

  // The sliding group's events say its blocks dropped out of the window, tagged with the group.
  void snapshot_reports_both_groups() {
    auto m = small_gemma3();
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 64;
    Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
    Request r;
    r.prompt = prompt_of(20, 4);
    r.max_new_tokens = 40;
    r.ignore_eos = true;
    e.submit(r);
    int dropped_sliding = 0, dropped_global = 0;
    // Each group's snapshot (kept current incrementally) against its pool, every step.
    auto matches_pool = [&](const Snapshot& sn, int32_t g) {
      const BlockPool& pool = e.hybrid_kv()->group(g).pool();
      std::vector<SeqId> lowest(static_cast<size_t>(pool.num_blocks()), -1);  // owner: lowest id holding it
      for (const SeqSnap& q : sn.seqs)
        if (g == 0 || !q.tables_after_first_group.empty())
          for (BlockId b : q.group_table(g))
            if (b != kNoBlock && (lowest[static_cast<size_t>(b)] < 0 || q.id < lowest[static_cast<size_t>(b)]))
              lowest[static_cast<size_t>(b)] = q.id;
      int32_t used = 0;
      for (BlockId b = 0; b < pool.num_blocks(); ++b) {
        const BlockSnap& x = sn.group_blocks(g)[static_cast<size_t>(b)];
        if (x.ref_count != pool.state(b).ref_count || x.filled != pool.state(b).filled ||
            x.owner != lowest[static_cast<size_t>(b)])
          return false;
        used += pool.state(b).ref_count > 0;
      }
      return used == (g == 0 ? sn.memory.blocks_used : sn.kv_groups[1].blocks_used);
    };
    while (e.step()) {
      const SnapshotPtr sn = e.latest_snapshot();
      QVERIFY(matches_pool(*sn, 0) && matches_pool(*sn, 1));
      for (const BlockEvent& ev : sn->events)
        if (ev.kind == BlockEventKind::DroppedOutOfWindow) ++(ev.group == 1 ? dropped_sliding : dropped_global);
    }
    QVERIFY(dropped_sliding > 3);
    QCOMPARE(dropped_global, 0);
    const auto snap = e.snapshot();
    QCOMPARE(snap->n_kv_groups(), 2);
    QCOMPARE(snap->kv_groups[1].name, std::string("sliding layers (window 12)"));
    QCOMPARE(snap->kv_groups[1].n_layers, 3);
    QCOMPARE(static_cast<int32_t>(snap->group_blocks(1).size()), e.config().sliding_num_blocks);
    QCOMPARE(static_cast<int32_t>(snap->group_blocks(0).size()), e.config().num_blocks);
  }

  // (3) Random allocate / append / fork / free / cancel in small pools, with preemption (free
  // a victim) whenever either pool runs dry: both managers' invariants hold after every
  // operation, a failed allocation changes nothing, and copies name the right group's blocks.
  void random_operations_keep_invariants() {
    const int32_t bs = 4;
    KvCacheConfig g;
    g.block_size = bs;
    g.num_blocks = 40;
    KvCacheConfig s = g;
    s.num_blocks = 14;
    s.sliding_window = 6;
    HybridKvManager kv(g, s);
    std::mt19937_64 rng(42);
    const std::vector<std::vector<TokenId>> bases = {prompt_of(23, 11), prompt_of(17, 12), prompt_of(30, 13)};
    std::map<SeqId, std::vector<TokenId>> live;  // tokens of each live sequence
    SeqId next = 1;
    int failures = 0, forks = 0, copies = 0, hits = 0;
    auto pools = [&] { return std::make_pair(kv.group(0).pool().num_free(), kv.group(1).pool().num_free()); };
    for (int op = 0; op < 4000; ++op) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 2 || live.empty()) {  // a new sequence from a shared base prompt
        std::vector<TokenId> toks = bases[rng() % bases.size()];
        toks.resize(static_cast<size_t>(5 + rng() % (toks.size() - 5)));
        const SeqId id = next++;
        const int32_t cached = kv.peek_cached_prefix(toks);
        const int32_t n = static_cast<int32_t>(toks.size()) - cached;
        if (!kv.can_admit(toks, cached + n)) continue;
        QCOMPARE(kv.attach_cached_prefix(id, toks), cached);
        hits += cached > 0;
        QVERIFY(kv.allocate_slots(id, toks, n));
        live[id] = toks;
      } else if (what < 6) {  // append 1..6 tokens to a random sequence; preempt on failure
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        const int32_t n = 1 + static_cast<int32_t>(rng() % 6);
        for (int32_t i = 0; i < n; ++i) it->second.push_back(static_cast<TokenId>(3 + rng() % 290));
        const auto before = pools();
        const int32_t len_before = kv.seq_len(it->first);
        if (!kv.allocate_slots(it->first, it->second, n)) {
          ++failures;
          QCOMPARE(pools(), before);  // nothing changed
          QCOMPARE(kv.seq_len(it->first), len_before);
          kv.free(it->first);  // preempted by recompute
          live.erase(it);
        }
      } else if (what < 7) {  // fork
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        const SeqId child = next++;
        kv.fork(it->first, child);
        live[child] = it->second;
        ++forks;
      } else if (what < 9) {  // finish
        auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
        kv.free(it->first);
        live.erase(it);
      } else {  // cancel a sequence that never got admitted
        kv.free(next + 1000);
      }
      for (const BlockCopy& c : kv.take_pending_copies()) {
        ++copies;
        QVERIFY(c.group == 0 || c.group == 1);
        QVERIFY(c.dst >= 0 && c.dst < kv.group(c.group).pool().num_blocks());
      }
      kv.validate();
      for (const auto& [id, toks] : live) QCOMPARE(kv.seq_len(id), static_cast<int32_t>(toks.size()));
    }
    QVERIFY(failures > 10 && forks > 100 && copies > 10 && hits > 10);
  }

  // A prefix hit is what BOTH groups hold: once the sliding pool evicted a prompt's blocks,
  // the global group's copy alone does not count, and nothing is attached.
  void prefix_hit_needs_both_groups() {
    const int32_t bs = 4;
    KvCacheConfig g;
    g.block_size = bs;
    g.num_blocks = 40;
    KvCacheConfig s = g;
    s.num_blocks = 8;
    s.sliding_window = 6;
    HybridKvManager kv(g, s);
    const std::vector<TokenId> a = prompt_of(21, 5);
    QVERIFY(kv.attach_cached_prefix(1, a) == 0);
    for (int32_t len = 0; len < 21; len += 4)
      QVERIFY(kv.allocate_slots(1, std::span(a).first(std::min(21, len + 4)), std::min(4, 21 - len)));
    kv.free(1);
    QCOMPARE(kv.peek_cached_prefix(a), 20);
    QCOMPARE(kv.group(0).peek_cached_prefix(a), 20);
    // Another prompt takes every sliding block: the first prompt's sliding blocks are evicted.
    const std::vector<TokenId> b = prompt_of(32, 6);
    QVERIFY(kv.attach_cached_prefix(2, b) == 0);
    QVERIFY(kv.allocate_slots(2, b, 32 - 1 - 6));  // 25 tokens: 7 blocks of which 4 dropped later
    QVERIFY(kv.allocate_slots(2, b, 6));
    QCOMPARE(kv.group(0).peek_cached_prefix(a), 20);
    QVERIFY(kv.group(1).peek_cached_prefix(a) < 20);
    QCOMPARE(kv.peek_cached_prefix(a), kv.group(1).peek_cached_prefix(a));
    const int32_t expect = std::min(kv.group(0).peek_cached_prefix(a), kv.group(1).peek_cached_prefix(a));
    QVERIFY(expect < 20);
    const int32_t hit = kv.attach_cached_prefix(3, a);
    QCOMPARE(hit, expect);
    QCOMPARE(kv.group(0).seq_len(3), hit);
    QCOMPARE(kv.group(1).seq_len(3), hit);
    kv.validate();
  }

  // Preemption when only the sliding pool runs out: every greedy sequence still produces the
  // tokens of the single-table run.
  void preemption_on_a_tight_sliding_pool() {
    const std::vector<std::vector<TokenId>> prompts = {prompt_of(40, 21), prompt_of(35, 22), prompt_of(44, 23),
                                                       prompt_of(30, 24)};
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 200;        // the global pool is roomy
    cfg.sliding_num_blocks = 8;  // 4 decoding sequences need 4 x 2-3
    cfg.sched.max_batched_tokens = 16;
    cfg.hybrid_kv = HybridKvMode::On;
    const Run tight = run_engine(cfg, prompts, 40);
    QVERIFY2(tight.preemptions > 0, "the sliding pool was meant to run out");
    cfg.hybrid_kv = HybridKvMode::Off;
    const Run single = run_engine(cfg, prompts, 40);
    QCOMPARE(single.preemptions, uint64_t(0));
    QCOMPARE(tight.outputs, single.outputs);
  }

  // Parallel samples fork the prompt's blocks in both groups and copy the shared partial last
  // block on write in each group's own pool: same samples as with one block table.
  void parallel_samples_fork_both_groups() {
    auto m = small_gemma3();
    std::vector<std::vector<TokenId>> outs[2];
    for (int hybrid = 0; hybrid < 2; ++hybrid) {
      EngineConfig cfg;
      cfg.block_size = 8;
      cfg.num_blocks = 120;
      cfg.hybrid_kv = hybrid ? HybridKvMode::On : HybridKvMode::Off;
      Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
      Request r;
      r.prompt = prompt_of(45, 41);  // 45 tokens: the last block is shared and partly filled
      r.max_new_tokens = 30;
      r.ignore_eos = true;
      r.sampling.temperature = 0.9f;
      r.sampling.seed = 5;
      const auto ids = e.submit_parallel(r, 3);
      uint64_t copies = 0;
      while (e.step()) {
        e.validate_kv();
        for (const BlockEvent& ev : e.snapshot()->events)
          copies += ev.kind == BlockEventKind::CopiedOnWrite && ev.group == hybrid;
      }
      QVERIFY2(copies >= 2, qPrintable(QString("copy-on-write events in group %1: %2").arg(hybrid).arg(copies)));
      for (SeqId id : ids) outs[hybrid].push_back(e.sequence(id).output_tokens());
    }
    QCOMPARE(outs[1], outs[0]);
    QVERIFY(outs[0][0] != outs[0][1]);  // different seeds, different samples
  }

  // (4) A chat's second turn reuses the first turn's blocks in both groups: the same hit as
  // the single-table path, and the same logits.
  void prefix_caching_across_turns() {
    auto m = small_gemma3();
    for (HybridKvMode mode : {HybridKvMode::On, HybridKvMode::Off}) {
      EngineConfig cfg;
      cfg.block_size = 8;
      cfg.num_blocks = 120;
      cfg.hybrid_kv = mode;
      Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
      Request t1;
      t1.prompt = prompt_of(50, 31);
      t1.max_new_tokens = 20;
      t1.ignore_eos = true;
      const SeqId a = e.submit(t1);
      e.run_until_idle();
      Request t2 = t1;
      t2.prompt.insert(t2.prompt.end(), e.sequence(a).output().begin(), e.sequence(a).output().end());
      const std::vector<TokenId> more = prompt_of(25, 32);
      t2.prompt.insert(t2.prompt.end(), more.begin() + 1, more.end());
      const SeqId b = e.submit(t2);
      e.run_until_idle();
      e.validate_kv();
      // Turn 1 computed 70 tokens (69 with a slot when it finished: the last sampled one was
      // never fed back), so 8 full blocks = 64 tokens are cached.
      QCOMPARE(e.sequence(b).num_cached_prompt, 64);
      QCOMPARE(e.snapshot()->counters.prefix_hits_tokens, uint64_t(64));
      QCOMPARE(e.hybrid_kv() != nullptr, mode == HybridKvMode::On);
    }
  }

  // Gemma 3 270M's KV layout (18 layers, 5 sliding : 1 global, window 512, 1 KV head x 256,
  // f32 KV, blocks of 16) in a 2304 MiB budget: how many 8K-token sequences the allocators hold
  // at once, filling sequences one after another by 512-token chunks, then decoding.
  void concurrency_at_8k_gemma3_270m_layout() {
    const int32_t bs = 16, ctx = 8192, chunk = 512;
    const int64_t budget = 2304LL << 20;
    const int64_t per_layer_block = 2LL * 1 * 256 * 4 * bs;
    auto fill = [&](KvSlotAllocator& kv) {
      int n = 0;
      for (SeqId id = 1;; ++id) {
        const std::vector<TokenId> toks = prompt_of(ctx, static_cast<uint64_t>(id));
        kv.attach_cached_prefix(id, std::span(toks).first(1));
        for (int32_t len = 0; len < ctx;) {
          const int32_t step = len < ctx - 64 ? std::min(chunk, ctx - 64 - len) : 1;  // prefill, then decode
          if (!kv.allocate_slots(id, std::span(toks).first(static_cast<size_t>(len + step)), step)) return n;
          len += step;
        }
        ++n;
      }
    };
    KvCacheConfig single;
    single.block_size = bs;
    single.num_blocks = static_cast<int32_t>(budget / (18 * per_layer_block));
    KvCacheManager one(single);
    const int n_single = fill(one);

    HybridPoolInput in;
    in.budget_bytes = budget;
    in.global_block_bytes = 3 * per_layer_block;
    in.sliding_block_bytes = 15 * per_layer_block;
    in.block_size = bs;
    in.window = 512;
    in.max_model_len = ctx;
    in.max_chunk = chunk;
    const HybridPoolSplit sp = split_hybrid_pools(in);
    QVERIFY(sp.global_blocks * in.global_block_bytes + sp.sliding_blocks * in.sliding_block_bytes <= budget);
    KvCacheConfig g = single;
    g.num_blocks = sp.global_blocks;
    KvCacheConfig sl = single;
    sl.num_blocks = sp.sliding_blocks;
    sl.sliding_window = 512;
    HybridKvManager two(g, sl);
    const int n_hybrid = fill(two);
    two.validate();
    qInfo(
        "8K sequences in 2304 MiB: single table %d (%d blocks), hybrid %d (global %d blocks, sliding %d blocks, sized for %.2f)",
        n_single, single.num_blocks, n_hybrid, sp.global_blocks, sp.sliding_blocks, sp.seqs_at_context);
    QCOMPARE(n_single, 8);  // 4096 blocks / 512 per sequence
    QCOMPARE(n_hybrid, static_cast<int>(std::floor(sp.seqs_at_context)));
    QVERIFY(n_hybrid >= 4 * n_single);  // 3/18 of the layers keep everything
  }

  // The budget split: at max_model_len both pools run out together, and --kv-blocks style
  // sizing (global blocks given) derives the sliding pool from the concurrency it allows.
  void pool_split() {
    HybridPoolInput in;
    in.budget_bytes = 1000LL * 16 * 100;
    in.global_block_bytes = 16 * 100;   // 1 layer
    in.sliding_block_bytes = 16 * 500;  // 5 layers
    in.block_size = 16;
    in.window = 512;
    in.max_model_len = 8192;
    in.max_chunk = 512;
    const HybridPoolSplit sp = split_hybrid_pools(in);
    QCOMPARE(sp.sliding_blocks_per_seq, 512 / 16 + 1);
    QVERIFY(static_cast<int64_t>(sp.global_blocks) * in.global_block_bytes +
                static_cast<int64_t>(sp.sliding_blocks) * in.sliding_block_bytes <=
            in.budget_bytes);
    const double seqs_global = static_cast<double>(sp.global_blocks) / (8192 / 16);
    QVERIFY2(std::abs(seqs_global - sp.seqs_at_context) < 1e-9,
             qPrintable(QString("%1 vs %2").arg(seqs_global).arg(sp.seqs_at_context)));
    QVERIFY(seqs_global > 1.0);  // the budget holds one 8K sequence with room to spare
    QVERIFY(sp.sliding_blocks >= static_cast<int32_t>(std::ceil(seqs_global * sp.sliding_blocks_per_seq)) + 512 / 16);
    // Given global blocks: the sliding pool never limits max_running short sequences.
    HybridPoolInput given = in;
    given.global_blocks = 5000;
    given.max_running = 64;
    QCOMPARE(split_hybrid_pools(given).sliding_blocks, 64 * 33 + 512 / 16 + 64);
    given.global_blocks = 300;
    QCOMPARE(split_hybrid_pools(given).sliding_blocks, 300);
    in.budget_bytes = 16 * 500 * 10;  // not even one sequence's sliding peak
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, split_hybrid_pools(in));
  }
};

QTEST_GUILESS_MAIN(TestHybridKv)
#include "test_hybrid_kv.moc"
