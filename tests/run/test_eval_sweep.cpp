// `kvscope-cli eval --sweep` and the StreamingLLM baselines (run/eval_sweep.*,
// run/recompute_window.*): grid parsing and expansion, the JSON's fields, the f32 full
// point against the reference (KL exactly 0, top-1 exactly 1), the Pareto frontier, per-position
// NLL without kept logits, and recompute-window against the scalar reference forward.
#include <QtTest>

#include <cmath>
#include <fstream>
#include <sstream>

#include "reference_forward.h"
#include "model/synthetic_model.h"
#include "run/eval_sweep.h"
#include "run/recompute_window.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::shared_ptr<Model> load(const std::string& rel) { return Model::load((test::models_dir() / rel).string()); }

std::vector<TokenId> story(const Model& m, size_t n) {
  std::ifstream f((test::source_dir() / "resources/texts/long-story.txt").string());
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<TokenId> t = m.tokenizer->encode(ss.str(), true, false);
  t.resize(std::min(n, t.size()));
  return t;
}

EvalConfig base_config() {
  EvalConfig c;
  c.threads = 2;
  c.chunk = 64;
  return c;
}

SweepPoint point(int64_t bytes, double kl) {
  SweepPoint p;
  p.run.peak_kv_bytes = bytes;
  p.agreement = LogitsAgreement{kl, kl, kl, 1.0};
  return p;
}

}  // namespace

class TestEvalSweep : public QObject {
  Q_OBJECT
  std::shared_ptr<Model> model_;

 private slots:
  void initTestCase() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    model_ = load("stories260K.gguf");
  }

  void parses_axes() {
    const SweepAxes a = parse_sweep_axes({"dtype=f16,int8,kivi4", "window=0,512", "sinks=0,4"});
    QCOMPARE(a.dtypes, (std::vector<KvDtype>{KvDtype::F16, KvDtype::INT8, KvDtype::KIVI4}));
    QCOMPARE(a.windows, (std::vector<int32_t>{0, 512}));
    QCOMPARE(a.sinks, (std::vector<int32_t>{0, 4}));
    const SweepAxes d = parse_sweep_axes({"window=64"});  // unnamed axes keep their defaults
    QCOMPARE(d.dtypes, std::vector<KvDtype>{KvDtype::F32});
    QCOMPARE(d.sinks, std::vector<int32_t>{0});
    for (const char* bad :
         {"dtype=f17", "window=-1", "window=12x", "sinks=", "budget=4", "window", "=4", "window=1,,2"})
      QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_sweep_axes({bad}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_sweep_axes({"window=4", "window=8"}));
    try {
      parse_sweep_axes({"dtype=f16,q3"});
      QFAIL("no error");
    } catch (const std::invalid_argument& e) {
      QVERIFY(std::string(e.what()).find("'q3'") != std::string::npos);  // the message names the bad value
    }
  }

  // dtype-major order; sinks without a window, or not fewer than the window, are no configuration.
  void expands_grid() {
    const auto pts = sweep_points(parse_sweep_axes({"dtype=f16,int8", "window=0,8,64", "sinks=0,8"}), base_config());
    QCOMPARE(pts.size(), size_t{8});  // per dtype: full, w8, w64, w64+8 (w0+8 and w8+8 left out)
    QCOMPARE(pts[0].kv_dtype, KvDtype::F16);
    QCOMPARE(pts[4].kv_dtype, KvDtype::INT8);
    QCOMPARE(pts[3].window, 64);
    QCOMPARE(pts[3].sinks, 8);
    for (const EvalConfig& c : pts) QVERIFY(c.sinks == 0 || (c.window > c.sinks));
    QCOMPARE(pts[1].threads, 2);  // the rest of the config comes from the base
  }

  // The KIVI residual axis: for KIVI dtypes only (int8 runs once, with 0), the base config's
  // --kivi-residual when the axis is not named, and the label naming R.
  void residual_axis() {
    EvalConfig base = base_config();
    const auto pts = sweep_points(parse_sweep_axes({"dtype=int8,kivi4", "residual=0,64"}), base);
    QCOMPARE(pts.size(), size_t{3});
    QCOMPARE(pts[0].kv_dtype, KvDtype::INT8);
    QCOMPARE(kivi_residual_for(pts[0]), 0);
    QCOMPARE(pts[2].kivi_residual, 64);
    QCOMPARE(sweep_point_label(pts[2]), std::string("kivi4 R 64 full"));
    QCOMPARE(sweep_point_label(pts[1]), std::string("kivi4 full"));
    base.kivi_residual = 32;
    const auto from_base = sweep_points(parse_sweep_axes({"dtype=int8,kivi2"}), base);
    QCOMPARE(from_base.size(), size_t{2});
    QCOMPARE(kivi_residual_for(from_base[0]), 0);
    QCOMPARE(kivi_residual_for(from_base[1]), 32);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_sweep_axes({"residual=-4"}));
  }

  // state=: a hybrid model's state slots in 16 bits, innermost; a real run halves the slot and
  // moves the distributions a little against the f32-state reference.
  void state_axis() {
    const auto pts = sweep_points(parse_sweep_axes({"dtype=f32,int8", "state=f32,bf16"}), base_config());
    QCOMPARE(pts.size(), size_t{4});
    QCOMPARE(pts[1].state_dtype, StateDtype::BF16);
    QCOMPARE(pts[1].kv_dtype, KvDtype::F32);
    QCOMPARE(sweep_point_label(pts[1]), std::string("f32 full state bf16"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_sweep_axes({"state=int8"}));
    SyntheticSpec s;
    s.arch = "qwen35";
    s.n_vocab = 300;
    s.n_embd = 64;
    s.n_layer = 4;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 128;
    s.ssm_state = 16;
    const auto path =
        test::tmp_dir() / ("eval-sweep-qwen35-" + std::to_string(QCoreApplication::applicationPid()) + ".gguf");
    write_synthetic_model(s, path.string());
    const auto m = Model::load(path.string());
    std::filesystem::remove(path);
    const SweepResult r =
        run_sweep(m, test::token_ids(80, 5), base_config(), parse_sweep_axes({"state=f32,f16"}), true);
    QCOMPARE(r.points.size(), size_t{2});
    QCOMPARE(r.points[1].run.state_bytes_per_seq * 2, r.points[0].run.state_bytes_per_seq);
    QCOMPARE(r.points[0].agreement->kl_mean, 0.0);  // f32 state: the reference itself
    QVERIFY(r.points[1].agreement->kl_mean > 0.0 && r.points[1].agreement->kl_mean < 1e-4);
  }

  void pareto_frontier() {
    std::vector<SweepPoint> p = {point(100, 0.0), point(50, 0.01), point(50, 0.02), point(40, 0.5), point(60, 0.01)};
    mark_pareto(p);
    QCOMPARE(p[0].pareto, true);  // most bytes, least KL
    QCOMPARE(p[1].pareto, true);
    QCOMPARE(p[2].pareto, false);  // same bytes as [1], more KL
    QCOMPARE(p[3].pareto, true);   // fewest bytes
    QCOMPARE(p[4].pareto, false);  // more bytes than [1], same KL
  }

  // The eviction axis: its specs through the engine's parser (a bad one names the word and the
  // spec), the grid pairing eviction with window 0 only and sinks without a window allowed
  // there, --snapkv-at carried to the points, and the label naming the policy.
  void evict_axis() {
    const SweepAxes a = parse_sweep_axes({"evict=off,h2o:20%,snapkv:64:8"});
    QCOMPARE(a.evicts.size(), size_t{3});
    QVERIFY(!a.evicts[0].on());
    QCOMPARE(a.evicts[1].policy, EvictPolicy::H2O);
    QCOMPARE(a.evicts[1].budget_pct, 20.0);
    QCOMPARE(a.evicts[2].policy, EvictPolicy::SnapKV);
    QCOMPARE(a.evicts[2].budget, 64);
    QCOMPARE(a.evicts[2].recent, 8);
    QCOMPARE(parse_sweep_axes({"window=64"}).evicts.size(), size_t{1});  // default: off only
    QVERIFY(!parse_sweep_axes({"window=64"}).evicts[0].on());
    try {
      parse_sweep_axes({"evict=off,lru:10"});
      QFAIL("an unknown policy was accepted");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(std::string(e.what()).find("evict=off,lru:10") != std::string::npos, e.what());
      QVERIFY2(std::string(e.what()).find("unknown policy 'lru'") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_sweep_axes({"evict=h2o:"}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_sweep_axes({"evict=h2o:0%"}));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_sweep_axes({"evict=off", "evict=h2o:8"}));

    EvalConfig base = base_config();
    base.evict.select_at = 100;  // --snapkv-at
    const auto pts = sweep_points(parse_sweep_axes({"window=0,32", "sinks=0,4", "evict=off,h2o:16"}), base);
    // off: full, w32, w32+4 (w0+4 left out); h2o: w0, w0+4 (every window > 0 left out).
    QCOMPARE(pts.size(), size_t{5});
    int evicting = 0;
    for (const EvalConfig& c : pts) {
      if (!c.evict.on()) {
        QCOMPARE(c.evict.select_at, 0);
        continue;
      }
      ++evicting;
      QCOMPARE(c.window, 0);
      QCOMPARE(c.evict.budget, 16);
      QCOMPARE(c.evict.select_at, 100);
    }
    QCOMPARE(evicting, 2);
    QCOMPARE(sweep_point_label(pts[1]), std::string("f32 full h2o:16"));
    QCOMPARE(sweep_point_label(pts[2]), std::string("f32 full sinks 4 h2o:16"));
    QCOMPARE(sweep_point_label(pts[0]), std::string("f32 full"));
  }

  // An eviction point through the real engine: it evicts (the JSON says how much), keeps fewer
  // tokens and bytes at its peak than the full cache, and pays for it in KL; the off point next
  // to it is the reference exactly.
  void sweep_with_eviction() {
    const auto toks = story(*model_, 200);
    const SweepResult r = run_sweep(model_, toks, base_config(), parse_sweep_axes({"evict=off,h2o:25%"}), true);
    QCOMPARE(r.points.size(), size_t{2});
    const SweepPoint &off = r.points[0], &h2o = r.points[1];
    QCOMPARE(off.agreement->kl_mean, 0.0);
    QCOMPARE(off.run.tokens_evicted, uint64_t{0});
    QVERIFY(h2o.cfg.evict.on());
    // 25% of 200 tokens = 50 kept. 64-token chunks: after each chunk's step the sequence is cut
    // back to 50 (the last chunk's step finishes it instead): 14 + 64 + 64 evicted. Snapshots
    // follow the cut, so the peak of kept tokens is the budget.
    QCOMPARE(h2o.run.tokens_evicted, uint64_t{14 + 64 + 64});
    QCOMPARE(h2o.run.peak_kept_tokens, 50);
    QVERIFY(h2o.run.peak_kv_bytes < off.run.peak_kv_bytes);
    QVERIFY(h2o.agreement->kl_mean > 0);
    const nlohmann::json j = sweep_json(r, false);
    QCOMPARE(j["reference"]["evict"].get<std::string>(), std::string("off"));
    QCOMPARE(j["points"][0]["evict"].get<std::string>(), std::string("off"));
    QCOMPARE(j["points"][1]["evict"].get<std::string>(), std::string("h2o:25%"));
    QCOMPARE(j["points"][1]["label"].get<std::string>(), std::string("f32 full h2o:25%"));
    QCOMPARE(j["points"][1]["tokens_evicted"].get<uint64_t>(), h2o.run.tokens_evicted);
    for (const char* k : {"peak_kept_tokens", "compactions", "compaction_bytes_copied"})
      QVERIFY2(j["points"][1].contains(k), k);
    QVERIFY(j["points"][1]["peak_kept_tokens"].get<int>() < 200);
  }

  // One sweep through the real engine: the f32 full point is scored against the reference like
  // every other point and comes out exactly equal (the runs are deterministic); every JSON field
  // is there; the NLL kept per position gives the perplexity.
  void sweep_json_and_reference_point() {
    const auto toks = story(*model_, 200);
    const SweepResult r =
        run_sweep(model_, toks, base_config(), parse_sweep_axes({"dtype=f32,int8", "window=0,64", "sinks=0,4"}), true);
    QCOMPARE(r.points.size(), size_t{6});
    const SweepPoint& f32 = r.points[0];
    QCOMPARE(f32.cfg.kv_dtype, KvDtype::F32);
    QCOMPARE(f32.cfg.window, 0);
    QVERIFY(f32.agreement.has_value());
    QCOMPARE(f32.agreement->kl_mean, 0.0);
    QCOMPARE(f32.agreement->kl_p99, 0.0);
    QCOMPARE(f32.agreement->top1, 1.0);
    QCOMPARE(f32.run.perplexity, r.reference.perplexity);
    QVERIFY(f32.pareto);                    // nothing has KL below 0
    const SweepPoint& int8w = r.points[4];  // int8 window 64
    QCOMPARE(int8w.cfg.window, 64);
    QVERIFY(int8w.agreement->kl_mean > 0 && int8w.agreement->top1 < 1.0);
    QVERIFY(int8w.run.peak_kv_bytes < f32.run.peak_kv_bytes);
    const nlohmann::json j = sweep_json(r, true);
    QCOMPARE(j["points"].size(), size_t{6});
    QCOMPARE(j["n_tokens"].get<int>(), 200);
    QCOMPARE(j["frontier_metric"].get<std::string>(), std::string("kl_mean"));
    for (const auto& p : j["points"]) {
      for (const char* k : {"label", "kv_dtype", "window", "sinks", "perplexity", "nll_mean", "kl_mean", "kl_p99",
                            "kl_max", "top1_agreement", "kv_bytes_per_token", "peak_kv_bytes", "peak_residual_bytes",
                            "peak_blocks_used", "pareto", "nll"})
        QVERIFY2(p.contains(k), k);
      QCOMPARE(p["nll"].size(), size_t{199});
      double s = 0;
      for (double v : p["nll"]) s += v;
      QVERIFY(std::fabs(std::exp(s / 199) / p["perplexity"].get<double>() - 1) < 1e-5);
    }
    QCOMPARE(j["points"][0]["kl_mean"].get<double>(), 0.0);
    QCOMPARE(j["points"][0]["top1_agreement"].get<double>(), 1.0);
    QCOMPARE(j["reference"]["kv_dtype"].get<std::string>(), std::string("f32"));
  }

  // Without KL no logits are kept, and the per-position NLL is the same as with them.
  void sweep_without_kl_keeps_only_nll() {
    const auto toks = story(*model_, 150);
    const SweepAxes axes = parse_sweep_axes({"window=32", "sinks=0,2"});
    const SweepResult with = run_sweep(model_, toks, base_config(), axes, true);
    const SweepResult without = run_sweep(model_, toks, base_config(), axes, false);
    QCOMPARE(without.points.size(), size_t{2});
    for (size_t i = 0; i < 2; ++i) {
      QVERIFY(!without.points[i].agreement.has_value());
      QVERIFY(without.points[i].run.logits.empty());
      QCOMPARE(without.points[i].run.nll, with.points[i].run.nll);
    }
    const nlohmann::json j = sweep_json(without, false);
    QVERIFY(j["points"][0]["kl_mean"].is_null());
    QVERIFY(!j["points"][0].contains("nll"));
    QCOMPARE(j["frontier_metric"].get<std::string>(), std::string("perplexity"));
  }

  // The kept logits and the per-position NLL agree (one row recomputed by hand).
  void nll_matches_logits() {
    const auto toks = story(*model_, 120);
    const EvalRun r = eval_text(model_, toks, base_config());
    QCOMPARE(r.nll.size(), size_t{119});
    for (size_t i : {size_t{0}, size_t{57}, size_t{118}}) {
      const auto& row = r.logits[i];
      double mx = -1e300, sum = 0;
      for (float v : row) mx = std::max(mx, static_cast<double>(v));
      for (float v : row) sum += std::exp(v - mx);
      const double want = -(row[static_cast<size_t>(toks[i + 1])] - mx - std::log(sum));
      QVERIFY(std::fabs(r.nll[i] - want) < 1e-5 * (1 + want));
    }
  }

  void spreads_positions() {
    QCOMPARE(spread_positions(10, 20, 3), (std::vector<int32_t>{10, 15, 20}));
    QCOMPARE(spread_positions(5, 7, 10), (std::vector<int32_t>{5, 6, 7}));
    QCOMPARE(spread_positions(5, 4, 3), std::vector<int32_t>{});
    const std::vector<TokenId> t = {1, 10, 11, 12, 13, 14};
    QCOMPARE(recompute_window_prompt(t, 4, 3), (std::vector<TokenId>{1, 12, 13}));  // BOS + the last W - 1 tokens
    QCOMPARE(recompute_window_prompt(t, 1, 8), (std::vector<TokenId>{1, 10}));
  }

  // Each scored row equals the scalar reference forward (tests/support/reference_forward.h) run from
  // scratch on that row's window: BOS + the last W - 1 tokens at positions 0..W-1. Rows whose
  // window still holds the whole prefix equal full attention.
  void recompute_window_matches_reference() {
    const auto toks = story(*model_, 120);
    const int32_t W = 24;
    const std::vector<int32_t> rows = {5, 23, 40, 77, 118};
    const RecomputeRun run = eval_recompute_window(model_, toks, W, rows, base_config());
    QCOMPARE(run.rows, rows);
    const EvalRun full = eval_text(model_, toks, base_config());
    double worst = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto prompt = recompute_window_prompt(toks, rows[i], W);
      test::ReferenceForward ref(model_);
      std::vector<float> lg;
      for (TokenId t : prompt) lg = ref.step(t);
      const double want = token_nll(lg, toks[static_cast<size_t>(rows[i] + 1)]);
      worst = std::max(worst, std::fabs(run.nll[i] - want));
      if (rows[i] < W) QVERIFY(std::fabs(run.nll[i] - full.nll[static_cast<size_t>(rows[i])]) < 1e-4);
    }
    qInfo("recompute window %d vs scalar reference: max |dNLL| %.3g; ppl on the rows %.4f", W, worst, run.perplexity);
    QVERIFY(worst < 1e-3);
    QVERIFY(run.nll[3] != full.nll[77]);  // row 77 no longer sees the start of the text
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, eval_recompute_window(model_, toks, W, {119}, base_config()));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, eval_recompute_window(model_, toks, 1, {5}, base_config()));
  }
};

QTEST_APPLESS_MAIN(TestEvalSweep)
#include "test_eval_sweep.moc"
