// Query tiling of prefill attention (cpu/query_tiles.h): the tile plan, and the paged engine's
// prompt logits with tiles (16 queries per walk over the keys) against one query per walk (the
// untiled path, attend_group), bit for bit, for full attention and a window, every KV dtype family
// (f32 read in place, f16 / int8 dequantized, kivi4 per-channel tiles, rot4 rotated), GQA and
// one KV head, chunked prefill (tiles of a later chunk see the keys of earlier ones), 1 and 2
// threads, a prompt length that is no multiple of the tile.
#include <QtTest>

#include <cmath>
#include <random>
#include <stdexcept>
#include <tuple>

#include "cpu/cpu_backend.h"
#include "cpu/query_tiles.h"
#include "engine/engine.h"
#include "kv/kv_dtype.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::vector<std::vector<float>> prompt_logits(const std::shared_ptr<const Model>& m, int threads, int32_t tile,
                                              int32_t window, KvDtype dtype) {
  EngineConfig cfg;
  cfg.kv_dtype = dtype;
  cfg.num_blocks = 120;
  cfg.window = window;
  cfg.sched.max_model_len = 1024;
  cfg.sched.max_batched_tokens = 256;  // three prefill chunks
  auto backend = std::make_unique<CpuBackend>(m, threads);
  backend->set_query_tile(tile);
  const CpuBackend* cpu = backend.get();
  Engine e(m, std::move(backend), cfg);
  Request r;
  std::mt19937 rng(5);
  r.prompt.resize(701);
  for (TokenId& t : r.prompt) t = static_cast<TokenId>(3 + rng() % 400);
  r.max_new_tokens = 1;
  r.ignore_eos = true;
  r.record_prompt_logits = true;
  const SeqId id = e.submit(r);
  e.run_until_idle();
  // The path under test really ran: every prompt query of every layer in tiles, or none.
  const int64_t queries =
      int64_t{700} * m->config.n_layer * m->config.n_head_kv;  // 701 prompt tokens, the last decodes
  if (tile > 1 ? cpu->phase_times().tiled_queries < queries : cpu->phase_times().tiled_queries != 0)
    throw std::runtime_error("tiled queries: " + std::to_string(cpu->phase_times().tiled_queries));
  return e.recorded_prompt_logits(id);
}

}  // namespace

class TestQueryTiles : public QObject {
  Q_OBJECT
 private slots:
  void tiles_stay_inside_one_sequence_and_run_of_positions() {
    // seq 0: positions 10..44 (35 tokens); seq 1: one decode token; seq 2: 5, 6, 7 then 9 (a gap).
    std::vector<int32_t> seq, pos;
    for (int32_t p = 10; p < 45; ++p) seq.push_back(0), pos.push_back(p);
    seq.push_back(1), pos.push_back(300);
    for (int32_t p : {5, 6, 7, 9}) seq.push_back(2), pos.push_back(p);
    std::vector<QueryTile> tiles;
    plan_query_tiles(seq, pos, 16, tiles);
    const std::vector<std::pair<int32_t, int32_t>> want{{0, 16}, {16, 16}, {32, 3}, {35, 1}, {36, 3}, {39, 1}};
    QCOMPARE(static_cast<int>(tiles.size()), static_cast<int>(want.size()));
    for (size_t i = 0; i < want.size(); ++i) {
      QCOMPARE(tiles[i].first, want[i].first);
      QCOMPARE(tiles[i].n, want[i].second);
    }
    plan_query_tiles(seq, pos, 1, tiles);  // tile 1: one query per tile
    QCOMPARE(static_cast<int>(tiles.size()), 40);
  }

  void prompt_logits_are_the_same_tiled_or_not() {
    for (const auto& [n_head, n_head_kv] : {std::pair{4, 2}, std::pair{4, 1}}) {
      SyntheticSpec spec;
      spec.n_head = n_head;
      spec.n_head_kv = n_head_kv;
      spec.n_layer = 2;
      spec.seed = 3;
      const auto path = test::tmp_dir() / ("query-tiles-" + std::to_string(n_head_kv) + ".gguf");
      write_synthetic_model(spec, path.string());
      const std::shared_ptr<const Model> m = Model::load(path.string());
      for (const auto& [window, dtype] :
           {std::tuple{0, KvDtype::F32}, std::tuple{100, KvDtype::F32}, std::tuple{0, KvDtype::F16},
            std::tuple{0, KvDtype::INT8}, std::tuple{100, KvDtype::KIVI4}, std::tuple{0, KvDtype::ROT4}}) {
        for (int threads : {1, 2}) {
          const auto untiled = prompt_logits(m, threads, 1, window, dtype);
          const auto tiled = prompt_logits(m, threads, kQueryTileMax, window, dtype);
          QCOMPARE(untiled.size(), size_t{700});  // row i predicts prompt token i + 1
          QCOMPARE(tiled.size(), untiled.size());
          float worst = 0, scale = 0;
          for (size_t r = 0; r < tiled.size(); ++r)
            for (size_t i = 0; i < tiled[r].size(); ++i) {
              worst = std::max(worst, std::abs(tiled[r][i] - untiled[r][i]));
              scale = std::max(scale, std::abs(untiled[r][i]));
            }
          const QString what =
              QStringLiteral("kv heads %1, window %2, %3, %4 threads: max |logit diff| %5 (max |logit| %6)")
                  .arg(n_head_kv)
                  .arg(window)
                  .arg(QString::fromLatin1(kv_dtype_name(dtype)))
                  .arg(threads)
                  .arg(worst)
                  .arg(scale);
          qInfo("%s", qPrintable(what));
          // Same keys in the same 64-row chunks per query: the same arithmetic, bit for bit (a
          // rounding difference would also flip 4-bit codes of the next layer's keys and show).
          QVERIFY2(worst == 0.0f, qPrintable(what));
        }
      }
    }
  }
};

QTEST_APPLESS_MAIN(TestQueryTiles)
#include "test_query_tiles.moc"
