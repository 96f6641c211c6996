// Per-layer token eviction (--evict h2o:B:layer, snapkv:B:layer): the spec, the kernel skipping
// one layer's own hidden rows (against a double-precision softmax over what that layer keeps),
// the per-layer weights it records, each layer's choice against its definition, a slot freed
// only once no layer can read it (a model's own sliding layers included), compaction carrying
// the per-layer masks (logits bit-identical), and the counters in the snapshot.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "engine/engine.h"
#include "engine/token_eviction.h"
#include "evict_harness.h"
#include "telemetry/snapshot_json.h"

using namespace kvscope;
using namespace kvscope::test;

namespace {

// A Gemma 3 shaped synthetic model: layers 0 and 1 slide over `window` positions, layer 2 sees
// everything (swa_pattern 3).
std::shared_ptr<const Model> sliding_model(int32_t window) {
  SyntheticSpec spec;
  spec.arch = "gemma3";
  spec.n_layer = 3;
  spec.n_head = 4;
  spec.n_head_kv = 1;
  spec.n_embd = 128;
  spec.n_ff = 256;
  spec.sliding_window = window;
  spec.swa_pattern = 3;
  spec.seed = 41;
  const auto path = tmp_dir() / ("evict-layer-gemma3-" + std::to_string(window) + ".gguf");
  write_synthetic_model(spec, path.string());
  return Model::load(path.string());
}

// Rows of seq a layer still reads: live slot, not hidden from it, inside its own window.
std::set<int32_t> visible_rows(const KvCacheManager& kv, SeqId id, int32_t layer, int32_t window) {
  std::set<int32_t> out;
  const int32_t next = kv.seq_len(id);
  for (int32_t row = 0; row < kv.token_holes().cache_rows(id); ++row) {
    if (kv.token_holes().row_hidden(id, layer, row)) continue;
    const int64_t s = kv.token_holes().row_slot(id, row);
    if (window > 0 && kv.token_holes().slot_positions()[static_cast<size_t>(s)] <= next - window) continue;
    out.insert(row);
  }
  return out;
}

std::set<int32_t> live_rows(const KvCacheManager& kv, SeqId id) {
  std::set<int32_t> out;
  for (int32_t row = 0; row < kv.token_holes().cache_rows(id); ++row)
    if (const int64_t s = kv.token_holes().row_slot(id, row);
        s >= 0 && !kv.token_holes().hole_mask()[static_cast<size_t>(s)])
      out.insert(row);
  return out;
}

}  // namespace

class TestEvictLayer : public QObject {
  Q_OBJECT
 private slots:
  void spec_names_the_scope() {
    EvictConfig e = parse_evict("h2o:20%:layer");
    QVERIFY(e.per_layer());
    QCOMPARE(e.budget_pct, 20.0);
    QCOMPARE(e.recent, -1);
    QCOMPARE(describe_evict(e), std::string("h2o:20%:layer"));
    e = parse_evict("h2o:64:16:layer");
    QVERIFY(e.per_layer());
    QCOMPARE(e.budget, 64);
    QCOMPARE(e.recent, 16);
    QCOMPARE(describe_evict(e), std::string("h2o:64:16:layer"));
    QVERIFY(parse_evict("snapkv:10%:layer").per_layer());
    QVERIFY(!parse_evict("h2o:64:seq").per_layer());
    QVERIFY(!parse_evict("h2o:64").per_layer());
    QCOMPARE(describe_evict(parse_evict("h2o:64:seq")), std::string("h2o:64"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_evict("h2o:layer"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_evict("h2o:64:16:heads"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_evict("h2o:64:layer:16"));
  }

  // Two layers with different hidden rows over one hole mask: each layer's output is the
  // softmax over its own kept rows only, each layer's recorded weights are that softmax's
  // probabilities, and the summed mass is their sum.
  void each_layer_attends_over_its_own_kept_rows() {
    const auto m = synthetic(101);
    const ModelConfig& c = m->config;
    const int32_t bs = 8, n_blocks = 12, n = 70, d = c.head_dim, n_q = c.n_head / c.n_head_kv;
    CpuBackend be(m, 2);
    be.init_kv(layout_of(*m, bs, n_blocks), {});
    std::vector<BlockId> table(static_cast<size_t>((n + bs - 1) / bs));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937_64(3));
    const size_t n_slots = static_cast<size_t>(n_blocks) * bs;
    std::vector<uint8_t> holes(n_slots, 0), layer_holes(n_slots * 2, 0);
    auto slot = [&](int32_t p) { return static_cast<int64_t>(table[static_cast<size_t>(p / bs)]) * bs + p % bs; };
    std::vector<uint8_t> kept[2] = {std::vector<uint8_t>(n, 1), std::vector<uint8_t>(n, 1)};
    std::mt19937_64 rng(11);
    for (int32_t p = 0; p < n - 1; ++p) {
      const uint64_t r = rng() % 6;
      if (r == 0) {  // a hole: gone for both layers
        holes[static_cast<size_t>(slot(p))] = 1;
        kept[0][static_cast<size_t>(p)] = kept[1][static_cast<size_t>(p)] = 0;
      } else if (r <= 2) {  // hidden from layer r - 1 only
        layer_holes[static_cast<size_t>(r - 1) * n_slots + static_cast<size_t>(slot(p))] = 1;
        kept[r - 1][static_cast<size_t>(p)] = 0;
      }
    }
    const std::vector<float> K = randn(static_cast<size_t>(2 * n) * c.n_head_kv * d, 21), V = randn(K.size(), 22);
    auto kv_row = [&](int32_t layer, int32_t p, int32_t g) {
      return ((static_cast<size_t>(layer) * n + p) * c.n_head_kv + g) * d;
    };
    for (int32_t layer = 0; layer < 2; ++layer)
      for (int32_t p = 0; p < n; ++p)
        for (int32_t g = 0; g < c.n_head_kv; ++g) {
          be.kv_storage().store(layer, false, slot(p), g, &K[kv_row(layer, p, g)]);
          be.kv_storage().store(layer, true, slot(p), g, &V[kv_row(layer, p, g)]);
        }
    BatchView b;
    b.block_tables.push_back(table);
    b.tokens = {5};
    b.positions = {n - 1};
    b.slot_mapping = {slot(n - 1)};
    b.seq_index = {0};
    b.holes = holes;
    b.layer_holes = layer_holes;
    b.record_attention = {1};
    std::vector<double> total(static_cast<size_t>(n), 0.0);
    for (int32_t layer = 0; layer < 2; ++layer) {
      const std::vector<float> q = randn(static_cast<size_t>(c.q_dim()), 30 + static_cast<uint64_t>(layer));
      std::vector<float> out(q.size());
      be.attention(layer, b, q.data(), out.data());
      std::vector<double> weight(static_cast<size_t>(n), 0.0);
      const std::vector<uint8_t>& keep = kept[layer];
      for (int32_t h = 0; h < c.n_head; ++h) {
        const int32_t g = h / n_q;
        std::vector<double> s(static_cast<size_t>(n), 0.0);
        double mx = -INFINITY, sum = 0;
        for (int32_t p = 0; p < n; ++p) {
          if (!keep[static_cast<size_t>(p)]) continue;
          double dot = 0;
          for (int32_t i = 0; i < d; ++i)
            dot += double(q[static_cast<size_t>(h * d + i)]) * K[kv_row(layer, p, g) + static_cast<size_t>(i)];
          s[static_cast<size_t>(p)] = dot * c.attn_scale;
          mx = std::max(mx, s[static_cast<size_t>(p)]);
        }
        for (int32_t p = 0; p < n; ++p)
          sum += keep[static_cast<size_t>(p)] ? std::exp(s[static_cast<size_t>(p)] - mx) : 0.0;
        for (int32_t i = 0; i < d; ++i) {
          double o = 0;
          for (int32_t p = 0; p < n; ++p)
            if (keep[static_cast<size_t>(p)])
              o += std::exp(s[static_cast<size_t>(p)] - mx) / sum * V[kv_row(layer, p, g) + static_cast<size_t>(i)];
          QVERIFY2(std::abs(o - out[static_cast<size_t>(h * d + i)]) < 1e-5,
                   "a layer's attention differs from the reference over its own kept rows");
        }
        for (int32_t p = 0; p < n; ++p)
          if (keep[static_cast<size_t>(p)])
            weight[static_cast<size_t>(p)] += std::exp(s[static_cast<size_t>(p)] - mx) / sum;
      }
      const auto lm = be.layer_attention_mass();
      QCOMPARE(lm.size(), n_slots * 2);
      for (int32_t p = 0; p < n; ++p) {
        const float got = lm[static_cast<size_t>(layer) * n_slots + static_cast<size_t>(slot(p))];
        QVERIFY2(std::abs(got - weight[static_cast<size_t>(p)]) < 1e-5,
                 "a layer's recorded weight differs from its reference softmax");
        if (!keep[static_cast<size_t>(p)]) QCOMPARE(got, 0.0f);  // a row hidden from this layer is never credited by it
        total[static_cast<size_t>(p)] += weight[static_cast<size_t>(p)];
      }
    }
    const auto mass = be.attention_mass();
    for (int32_t p = 0; p < n; ++p)
      QVERIFY(std::abs(mass[static_cast<size_t>(slot(p))] - total[static_cast<size_t>(p)]) < 1e-5);
  }

  // One eviction step on a state whose per-layer weights we read first: each layer hides
  // exactly its lowest-weighted candidates; a row becomes a hole only if both layers dropped it.
  void each_layer_evicts_its_own_lowest() {
    const auto m = synthetic(102);
    Driven dr(m, 8, 32, m->config.n_layer);
    dr.toks = tokens(40, 7);
    dr.feed(0, 40, /*record=*/true);
    const auto lm = dr.be.layer_attention_mass();
    const size_t n_slots = dr.kv.token_holes().hole_mask().size();
    std::set<int32_t> want[2];
    for (int32_t l = 0; l < 2; ++l) {
      std::vector<std::pair<float, int32_t>> cand;  // not sinks (2), not recent (6)
      for (int32_t row = 2; row < 40 - 6; ++row)
        cand.push_back(
            {lm[static_cast<size_t>(l) * n_slots + static_cast<size_t>(dr.kv.token_holes().row_slot(1, row))], row});
      std::stable_sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      for (int32_t i = 0; i < 20; ++i) want[l].insert(cand[static_cast<size_t>(i)].second);
    }
    QVERIFY2(want[0] != want[1], "the two layers' weights should choose differently on this model");
    EvictConfig cfg = parse_evict("h2o:20:6:layer");
    cfg.compact_at = 1.0;
    TokenEvictor ev(cfg, 0, 2, dr.kv, dr.be, {0, 0});
    Sequence s;
    s.id = 1;
    s.set_prompt(dr.toks);
    s.num_computed = 40;
    SchedulerOutput out;
    out.chunks.push_back(ScheduledChunk{&s, 39, 1, true});
    ev.after_step(out);
    std::set<int32_t> both;
    for (int32_t row : want[0])
      if (want[1].count(row)) both.insert(row);
    for (int32_t l = 0; l < 2; ++l) {
      std::set<int32_t> hidden;
      for (int32_t row = 0; row < 40; ++row)
        if (dr.kv.token_holes().row_hidden(1, l, row)) hidden.insert(row);
      QCOMPARE(hidden, want[l]);
      QCOMPARE(static_cast<int32_t>(visible_rows(dr.kv, 1, l, 0).size()), 20);
    }
    std::set<int32_t> holes;
    for (int32_t row = 0; row < 40; ++row)
      if (!live_rows(dr.kv, 1).count(row)) holes.insert(row);
    QCOMPARE(holes, both);
    const TokenEvictionCounters c = dr.kv.token_eviction_counters();
    QCOMPARE(c.tokens_evicted, static_cast<uint64_t>(both.size()));
    QCOMPARE(c.tokens_hidden, uint64_t{40});
    QCOMPARE(c.hidden_now, static_cast<uint64_t>(40 - 2 * both.size()));
    dr.kv.validate();
  }

  // Compaction moves survivors together; their per-layer bits move with them, so the same
  // forward reads the same rows in every layer and the logits are bit-identical.
  void compaction_carries_the_layer_masks() {
    const auto m = synthetic(103);
    Driven dr(m, 8, 24, m->config.n_layer);
    dr.toks = tokens(61, 9);
    dr.feed(0, 60);
    std::vector<int32_t> gone, hide0, hide1;
    for (int32_t row = 3; row < 55; ++row) {
      if (row % 4 == 0 || (row >= 16 && row < 24))
        gone.push_back(row);
      else if (row % 4 == 1)
        hide0.push_back(row);
      else if (row % 4 == 2)
        hide1.push_back(row);
    }
    dr.kv.token_holes().hide_rows(1, 0, hide0);
    dr.kv.token_holes().hide_rows(1, 1, hide1);
    dr.kv.token_holes().punch_rows(1, gone);
    const std::vector<float> before = dr.feed(60, 61);
    const uint64_t hidden = dr.kv.token_eviction_counters().hidden_now;
    dr.kv.token_holes().compact(1);
    dr.be.copy_slots(dr.kv.token_holes().take_pending_slot_copies());
    dr.kv.validate();
    QCOMPARE(dr.kv.token_holes().seq_holes(1), 0);
    QCOMPARE(dr.kv.token_eviction_counters().hidden_now, hidden);
    QVERIFY(dr.kv.token_holes().cache_row(1, 60) < 60);
    const std::vector<float> after = dr.compute(60, 61);
    QVERIFY(before == after);
  }

  // Through the engine, one token a step, on a model with two sliding layers (window 16) and
  // one global layer: after every step every layer reads at most the budget, sinks and the
  // recent window stay visible to every layer that can reach them, and the live slots are
  // exactly the union of what some layer still reads (plus sinks and recent rows).
  void engine_keeps_the_union_of_the_layers_choices() {
    const int32_t window = 16;
    const auto m = sliding_model(window);
    QVERIFY(m->config.layer_is_swa(0) && m->config.layer_is_swa(1) && !m->config.layer_is_swa(2));
    EngineConfig ec;
    ec.block_size = 8;
    ec.num_blocks = 64;
    ec.prefix_caching = false;
    ec.hybrid_kv = HybridKvMode::Off;
    ec.sinks = 2;
    ec.evict = parse_evict("h2o:12:4:layer");
    ec.sched.max_batched_tokens = 1;
    Engine e(m, std::make_unique<CpuBackend>(m, 1), ec);
    Request r;
    r.prompt = tokens(70, 13);
    r.max_new_tokens = 20;
    r.ignore_eos = true;
    const SeqId id = e.submit(r);
    const KvCacheManager& kv = *e.paged_kv();
    QCOMPARE(kv.token_holes().layers(), 3);
    int checked = 0, union_larger = 0;
    while (e.step()) {
      e.validate_kv();
      if (!kv.has_seq(id)) break;
      const int32_t len = kv.token_holes().cache_rows(id);
      std::set<int32_t> expect;
      for (int32_t l = 0; l < 3; ++l) {
        const std::set<int32_t> vis = visible_rows(kv, id, l, m->config.layer_is_swa(l) ? window : 0);
        QVERIFY2(static_cast<int32_t>(vis.size()) <= 12, "a layer reads more than the budget");
        for (int32_t row = std::max(0, len - 4); row < len; ++row) QVERIFY(vis.count(row));  // recent, for every layer
        expect.insert(vis.begin(), vis.end());
      }
      for (int32_t row = 0; row < std::min(2, len); ++row) expect.insert(row);  // sinks are never evicted
      QCOMPARE(live_rows(kv, id), expect);
      union_larger += static_cast<int32_t>(expect.size()) > 12;
      ++checked;
    }
    QVERIFY(checked > 60);
    QVERIFY2(union_larger > 0,
             "the layers never chose differently: per-layer eviction would equal one choice per sequence");
    const auto snap = e.snapshot();
    QVERIFY(snap->eviction.tokens_hidden > 0);
    QVERIFY(snap->eviction.tokens_evicted > 0);
    const nlohmann::json j = to_json(*snap);
    QCOMPARE(j["eviction"]["policy"].get<std::string>(), std::string("h2o:12:4:layer"));
    QCOMPARE(j["eviction"]["tokens_hidden"].get<uint64_t>(), snap->eviction.tokens_hidden);
  }

  // SnapKV per layer chooses once, when the prompt is in: each layer then reads the budget of
  // the prompt, and generation appends without hiding more.
  void snapkv_per_layer_chooses_once() {
    const auto m = synthetic(104);
    EngineConfig ec;
    ec.block_size = 8;
    ec.num_blocks = 64;
    ec.prefix_caching = false;
    ec.evict = parse_evict("snapkv:16:4:layer");
    Engine e(m, std::make_unique<CpuBackend>(m, 1), ec);
    Request r;
    r.prompt = tokens(64, 17);
    r.max_new_tokens = 10;
    r.ignore_eos = true;
    const SeqId id = e.submit(r);
    const KvCacheManager& kv = *e.paged_kv();
    uint64_t hidden_at_choice = 0;
    while (e.step()) {
      e.validate_kv();
      if (!kv.has_seq(id)) break;
      const uint64_t h = kv.token_eviction_counters().tokens_hidden;
      if (hidden_at_choice == 0 && h > 0) {
        hidden_at_choice = h;
        for (int32_t l = 0; l < 2; ++l) QCOMPARE(static_cast<int32_t>(visible_rows(kv, id, l, 0).size()), 16);
      }
      QCOMPARE(h, hidden_at_choice);  // never again after the choice
    }
    QCOMPARE(hidden_at_choice, uint64_t{2 * (64 - 16)});
  }
};

QTEST_GUILESS_MAIN(TestEvictLayer)
#include "test_evict_layer.moc"
