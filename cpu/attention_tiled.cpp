// Prefill attention by query tiles (cpu/query_tiles.h): CpuBackend::attend_tile and the rule
// for when attention() uses it.
#include <cassert>
#include <optional>

#include "cpu/visible_keys.h"
#include "cpu/cpu_backend.h"
#include "cpu/kv_quant4.h"
#include "cpu/online_attention.h"

namespace kvscope {

namespace {

// The rows [a, b) of a chunk made of `runs` (rows counted from the chunk's first), as runs.
int32_t slice_runs(const OnlineAttention::Rows* runs, int32_t n_runs, int32_t a, int32_t b,
                   OnlineAttention::Rows* sub) {
  int32_t n_sub = 0, start = 0;
  for (int32_t r = 0; r < n_runs && start < b; start += runs[r].n, ++r) {
    const int32_t lo = std::max(a, start), hi = std::min(b, start + runs[r].n);
    if (lo >= hi) continue;
    const int32_t skip = lo - start;
    sub[n_sub++] = {runs[r].k + skip * runs[r].k_stride, runs[r].k_stride, runs[r].v + skip * runs[r].v_stride,
                    runs[r].v_stride, hi - lo};
  }
  return n_sub;
}

}  // namespace

// Tiles pay off when several consecutive queries of a sequence share keys and there is enough
// work to keep every thread busy without split-KV. Sinks (keys re-rotated per query's cache
// position), token eviction (holes, compacted rows) and attention recording (per-query weights)
// keep the one-query path, which handles them.
bool CpuBackend::plan_tiles(const BatchView& batch, int32_t n_head_kv) {
  if (query_tile_ <= 1 || sink_mode() || !batch.holes.empty() || !batch.rows.empty() || !batch.record_attention.empty())
    return false;
  plan_query_tiles(batch.seq_index, batch.positions, query_tile_, tiles_);
  const int64_t units = static_cast<int64_t>(tiles_.size()) * n_head_kv;
  return tiles_.size() < static_cast<size_t>(batch.n_tokens()) && units >= 2LL * pool_.size();
}

// One walk over the keys the tile's queries see. Query i's keys are [lo_i, p_i] and attend_group
// would add them in chunks [lo_i + 64k, lo_i + 64(k + 1)); the tile keeps exactly those chunks
// (so each query's online softmax does the same arithmetic in the same order as untiled, bit
// for bit): step k loads the rows every query's k-th chunk needs, [lo_0 + 64k, lo_last + 64k +
// 64), at most 64 + 15 rows, once, and each query adds its own 64-row slice of them. Windows make
// lo_i grow with i, so consecutive steps share up to 15 rows, loaded again: 1 + 15/64 loads per
// key and tile against 16 untiled.
void CpuBackend::attend_tile(int32_t layer, const BatchView& batch, const QueryTile& tile, int32_t g, const float* q,
                             float* out, Scratch& sc) const {
  const ModelConfig& c = model_->config;
  const int32_t group = layer_group_[static_cast<size_t>(layer)];
  int32_t kv_layer = 0;
  const CpuKvStorage& kv = kv_of(layer, &kv_layer);
  const int32_t bs = kv.layout().block_size, d = c.layer_head_dim(layer);
  const int32_t n_q = c.n_head / c.layer_n_head_kv(layer);
  const auto& table = batch.group_tables(group)[static_cast<size_t>(batch.seq_index[static_cast<size_t>(tile.first)])];
  const int32_t window = layer_window(layer);
  const int32_t first = batch.positions[static_cast<size_t>(tile.first)], last = first + tile.n - 1;
  auto lo_of = [window](int32_t pos) { return window_start(pos, window); };
  constexpr int32_t kChunk = OnlineAttention::kMaxChunk, kSpan = kChunk + kQueryTileMax;
  const size_t span_floats = static_cast<size_t>(kSpan) * d;
  if (sc.k_tile.size() < span_floats) sc.k_tile.resize(span_floats);
  if (sc.v_tile.size() < span_floats) sc.v_tile.resize(span_floats);

  // rot4 stores R k and R v: scores use R q, outputs are rotated back at the end (as attend_group).
  const bool rotated = kv_dtype_rotated(kv.layout().dtype);
  const int64_t head_floats = static_cast<int64_t>(n_q) * d;
  auto q_of = [&](int32_t i) { return q + (tile.first + i) * c.layer_q_dim(layer) + g * head_floats; };
  // Output rows: dv per head (latent attention: the latent's width, < d).
  const int64_t dv = c.latent_kv() ? c.attn_v_dim() : d;
  auto out_of = [&](int32_t i) { return out + ((tile.first + i) * c.n_head + static_cast<int64_t>(g) * n_q) * dv; };
  if (rotated) {
    sc.rot.resize(static_cast<size_t>(tile.n * head_floats));
    for (int32_t i = 0; i < tile.n; ++i) {
      float* qr = sc.rot.data() + i * head_floats;
      std::copy(q_of(i), q_of(i) + head_floats, qr);
      for (int32_t h = 0; h < n_q; ++h) kvq4::rotate(qr + h * d, d);
    }
  }
  std::optional<OnlineAttention> att[kQueryTileMax];
  for (int32_t i = 0; i < tile.n; ++i)
    att[i].emplace(rotated ? sc.rot.data() + i * head_floats : q_of(i), n_q, d, c.attn_scale, out_of(i),
                   static_cast<int32_t>(dv));

  OnlineAttention::Rows runs[kSpan], sub[kSpan];
  const int32_t lo_first = lo_of(first), lo_last = lo_of(last);
  for (int32_t step = 0;; step += kChunk) {
    const int32_t from = lo_first + step, to = std::min(lo_last + step + kChunk, last + 1);  // rows [from, to)
    if (from >= to) break;
    int32_t n_runs = 0, filled = 0;
    for (int32_t p = from; p < to;) {
      const int32_t lb = p / bs, off = p % bs;
      const int32_t n = std::min(bs - off, to - p);
      const BlockId b = table[static_cast<size_t>(lb)];
      assert(b != kNoBlock && "attention reached a dropped block");
      const auto [k, v] = load_kv_rows(kv, kv_layer, b, g, off, n, sc, filled);
      OnlineAttention::append_run(runs, n_runs, k, v, n, d);
      filled += n;
      p += n;
    }
    for (int32_t i = 0; i < tile.n; ++i) {  // query i's chunk: [lo_i + step, lo_i + step + 64) up to p_i
      const int32_t a = lo_of(first + i) + step;
      const int32_t e = std::min(a + kChunk, first + i + 1);
      if (e <= a) continue;
      const int32_t n_sub = slice_runs(runs, n_runs, a - from, e - from, sub);
      att[i]->add(sub, n_sub);
    }
  }
  const std::vector<float>& sinks = model_->weights.layers[static_cast<size_t>(layer)].attn_sinks;
  for (int32_t i = 0; i < tile.n; ++i) {
    if (!sinks.empty() && policy_.learned_sinks) att[i]->add_sink_logits(&sinks[static_cast<size_t>(g) * n_q]);
    att[i]->finish();
    if (rotated)
      for (int32_t h = 0; h < n_q; ++h) kvq4::unrotate(out_of(i) + static_cast<int64_t>(h) * d, d);
  }
}

}  // namespace kvscope
