// CpuBackend::attend_group (cpu/cpu_backend.h): the query heads of one token that share a KV
// head, against the keys their sequence can see, in one online-softmax pass over the block
// table. The steps: which keys are visible (window, sinks, split part), turn the queries
// (rot4's rotation, sink mode's RoPE), walk the visible keys block by block into the online
// softmax (skipping holes, prefetching ahead, re-roping keys in sink mode), finish and turn the
// output back.
#include <algorithm>
#include <cassert>

#include "cpu/cpu_backend.h"
#include "cpu/kv_quant4.h"
#include "cpu/online_attention.h"
#include "cpu/ops.h"
#include "cpu/visible_keys.h"

namespace kvscope {

namespace {
constexpr int32_t kChunk = OnlineAttention::kMaxChunk;

// Rows [off, off + n) of block b under a hole mask: > 0, the first that many rows are kept;
// < 0, the first -result rows are skipped (all n when the block was freed): holes, and rows
// whose position is below min_pos (a layer's own sliding window, once compaction made rows and
// positions differ).
// layer_holes (per-layer token eviction, may be null): this layer's own mask, skipped the same way.
int32_t kept_run(const uint8_t* holes, const uint8_t* layer_holes, const int32_t* slot_pos, int32_t min_pos, BlockId b,
                 int32_t bs, int32_t off, int32_t n) {
  if (b == kNoBlock) return -n;
  const int64_t s0 = static_cast<int64_t>(b) * bs + off;
  auto kept = [&](int32_t j) {
    return !holes[s0 + j] && (!layer_holes || !layer_holes[s0 + j]) && (!slot_pos || slot_pos[s0 + j] >= min_pos);
  };
  const bool first = kept(0);
  int32_t k = 1;
  while (k < n && kept(k) == first) ++k;
  return first ? k : -k;
}
}  // namespace

// Visible positions: [0, n_sink) then [lo, pos], block by block. The rows of consecutive
// blocks are handed to the kernel together, up to kChunk at a time (one softmax update per
// chunk, as on the contiguous path). When the head's visible K/V is larger than
// prefetch_min_bytes_, the blocks of the next chunk are prefetched from the table while this
// one computes: the hardware prefetcher cannot follow scattered blocks, the table can. Below
// that size (K/V likely in cache) the prefetch instructions cost more than they save; numbers
// in docs/performance.md (`kvscope-cli bench --kv-prefetch`).
class CpuBackend::KeyWalk {
 public:
  KeyWalk(const CpuBackend& be, int32_t layer, const BatchView& batch, int32_t t, int32_t g, const VisibleKeys& vis,
          OnlineAttention& att, Scratch& sc, float* krot, bool rotated)
      : be_(be),
        c_(be.model_->config),
        kv_(be.kv_of(layer, &kv_layer_)),
        layer_(layer),
        g_(g),
        vis_(vis),
        table_(batch.group_tables(
            be.layer_group_[static_cast<size_t>(layer)])[static_cast<size_t>(batch.seq_index[static_cast<size_t>(t)])]),
        att_(att),
        sc_(sc),
        krot_(krot),
        rotated_(rotated) {
    bs_ = kv_.layout().block_size;
    d_ = c_.layer_head_dim(layer);
    holes_ = batch.holes.empty() ? nullptr : batch.holes.data();  // token eviction
    layer_holes_ = batch.layer_holes.empty()
                       ? nullptr
                       : batch.layer_holes.data() + static_cast<size_t>(layer) * batch.holes.size();
    slot_pos_ = vis.window > 0 && !batch.slot_positions.empty() ? batch.slot_positions.data() : nullptr;
    min_pos_ = batch.positions[static_cast<size_t>(t)] - vis.window + 1;
    record = !batch.record_attention.empty() && batch.record_attention[static_cast<size_t>(t)];
    pf_dist_ = std::max(1, kChunk / bs_);
    prefetch_ = static_cast<int64_t>(vis.n_vis) * d_ * kv_elem_bytes(kv_.layout().dtype) * 2 > be.prefetch_min_bytes_;
    idx_ = vis.v0;
  }

  // Every visible key of this call, [v0, v1): visible key v is position v among the sinks,
  // position lo + (v - n_sink) after them.
  void walk() {
    const VisibleKeys& v = vis_;
    run(std::min(v.v0, v.n_sink), std::min(v.v1, v.n_sink));
    run(v.lo + std::max(v.v0, v.n_sink) - v.n_sink, v.lo + std::max(v.v1, v.n_sink) - v.n_sink);
    flush();
    assert(idx_ == v.v1);
  }

  bool record = false;  // this token records its attention weights (token eviction)

 private:
  void run(int32_t from, int32_t to) {  // positions [from, to)
    for (int32_t p = from; p < to;) {
      const int32_t lb = p / bs_, off = p % bs_;
      int32_t n = std::min({bs_ - off, to - p, kChunk - filled_});
      const BlockId b = table_[static_cast<size_t>(lb)];
      if (holes_) {  // token-evicted slots (and freed blocks) are skipped like positions outside the window
        const int32_t kept = kept_run(holes_, layer_holes_, slot_pos_, min_pos_, b, bs_, off, n);
        if (kept < 0) {
          p -= kept;
          idx_ -= kept;
          continue;
        }
        n = kept;
      }
      assert(b != kNoBlock && "attention reached a dropped block");
      if (prefetch_ && (p == from || off == 0)) prefetch_block(lb + pf_dist_, to);
      add_rows(b, off, n);
      p += n;
    }
  }

  // Requests the tiles of table block tb (the next chunk's) while this chunk computes.
  void prefetch_block(int32_t tb, int32_t to) {
    const int32_t after = to - tb * bs_;  // positions wanted in or past the target block
    if (after <= 0 || table_[static_cast<size_t>(tb)] == kNoBlock) return;
    const BlockId next = table_[static_cast<size_t>(tb)];
    const int32_t rows = std::min({bs_, after, kChunk});
    for (bool is_v : {false, true}) {
      if (is_v && kv_.layout().latent) break;  // no V array
      const auto [ptr, bytes] = kv_.tile_span(kv_layer_, is_v, next, g_, rows);
      pf_[n_pf_++] = {ptr, bytes};
    }
    kv_.prefetch_scales(kv_layer_, next, g_);
  }

  // Rows [off, off + n) of block b join the pending chunk (scored when it is full).
  void add_rows(BlockId b, int32_t off, int32_t n) {
    auto [k, v] = be_.load_kv_rows(kv_, kv_layer_, b, g_, off, n, sc_, filled_);
    if (krot_) k = rope_keys(k, n);
    OnlineAttention::append_run(runs_, n_runs_, k, v, n, d_);
    if (record)
      for (int32_t j = 0; j < n; ++j) sc_.rec_slots.push_back(static_cast<int64_t>(b) * bs_ + off + j);
    filled_ += n;
    if (filled_ == kChunk) flush();
    idx_ += n;
  }

  // Sink mode: keys are stored before RoPE, rotated here to cache positions idx_...
  const float* rope_keys(const float* k, int32_t n) {
    float* kr0 = krot_ + static_cast<int64_t>(filled_) * d_;
    for (int32_t j = 0; j < n; ++j) {
      float* kr = kr0 + static_cast<int64_t>(j) * d_;
      std::copy(k + static_cast<int64_t>(j) * d_, k + static_cast<int64_t>(j + 1) * d_, kr);
      if (rotated_) kvq4::unrotate(kr, d_);
      rope_apply(kr + c_.rope_offset(), c_.layer_rope_dim(layer_), be_.cache_rope(layer_, idx_ + j), c_.traits.rope);
    }
    return kr0;
  }

  void flush() {  // one online-softmax update for the rows gathered
    if (n_runs_ > 0) prefetch_ ? att_.add(runs_, n_runs_, pf_, n_pf_) : att_.add(runs_, n_runs_);
    n_runs_ = filled_ = n_pf_ = 0;
  }

  const CpuBackend& be_;
  const ModelConfig& c_;
  int32_t kv_layer_ = 0;
  const CpuKvStorage& kv_;
  int32_t layer_, g_;
  const VisibleKeys& vis_;
  std::span<const BlockId> table_;
  OnlineAttention& att_;
  Scratch& sc_;
  float* krot_;
  bool rotated_;
  int32_t bs_ = 0, d_ = 0;
  const uint8_t* holes_ = nullptr;
  const uint8_t* layer_holes_ = nullptr;
  const int32_t* slot_pos_ = nullptr;
  int32_t min_pos_ = 0, pf_dist_ = 1;
  bool prefetch_ = false;
  OnlineAttention::Rows runs_[kChunk];
  OnlineAttention::Prefetch pf_[2 * kChunk];    // next chunk's tiles, requested during this one
  int32_t n_runs_ = 0, filled_ = 0, n_pf_ = 0;  // rows gathered for the pending chunk
  int32_t idx_ = 0;                             // cache position of the next visible key
};

CpuBackend::VisibleKeys CpuBackend::visible_keys(int32_t layer, const BatchView& batch, int32_t t,
                                                 const AttendPart* part) const {
  VisibleKeys v;
  // The query's cache row: its position unless token eviction compacted the table.
  v.pos = batch.rows.empty() ? batch.positions[static_cast<size_t>(t)] : batch.rows[static_cast<size_t>(t)];
  v.window = layer_window(layer);
  const VisibleRange range = visible_range(v.pos, v.window, layer_sinks(layer));
  v.lo = range.lo;
  v.n_sink = range.n_sink;
  v.n_vis = range.n_vis;
  // Split-KV: this call covers visible keys [v0, v1) (all of them without a part).
  v.v0 = part ? static_cast<int32_t>(static_cast<int64_t>(v.n_vis) * part->part / part->parts) : 0;
  v.v1 = part ? static_cast<int32_t>(static_cast<int64_t>(v.n_vis) * (part->part + 1) / part->parts) : v.n_vis;
  return v;
}

// rot4 stores R k and R v (cpu/kv_quant4.h): scores use R q (q.k = Rq.Rk), the output is
// summed in the rotated basis and rotated back once at the end. In sink mode the keys are
// turned back before RoPE instead (RoPE does not commute with R), and q stays as it is.
const float* CpuBackend::turn_queries(int32_t layer, const float* q, int32_t n_vis, bool rotated, Scratch& sc,
                                      float** krot) const {
  const ModelConfig& c = model_->config;
  const int32_t n_q = c.n_head / c.layer_n_head_kv(layer), d = c.layer_head_dim(layer);
  *krot = nullptr;
  // A layer without RoPE (smollm3's every fourth) has nothing to re-rotate in sink mode.
  const bool sink_rope = sink_mode() && c.layer_has_rope(layer);
  if (!sink_rope && !rotated) return q;
  sc.rot.resize(static_cast<size_t>(n_q) * d + static_cast<size_t>(kChunk) * d);
  float* qrot = sc.rot.data();
  if (sink_rope) *krot = qrot + static_cast<int64_t>(n_q) * d;
  std::copy(q, q + static_cast<int64_t>(n_q) * d, qrot);
  for (int32_t h = 0; h < n_q; ++h)
    sink_rope ? rope_apply(qrot + h * d + c.rope_offset(), c.layer_rope_dim(layer), cache_rope(layer, n_vis - 1),
                           c.traits.rope)
              : kvq4::rotate(qrot + h * d, d);
  return qrot;
}

// One pass over the block table with online softmax (cpu/online_attention.h): each visible
// K/V row is read (and dequantized) once for the whole group. Never assumes physical blocks
// are adjacent. In sink mode the i-th visible key sits at cache position i and the query at
// the last one (n_vis - 1); both are rotated here.
void CpuBackend::attend_group(int32_t layer, const BatchView& batch, int32_t t, int32_t g, const float* q, float* out,
                              Scratch& sc, const AttendPart* part) const {
  const ModelConfig& c = model_->config;
  const int32_t n_q = c.n_head / c.layer_n_head_kv(layer), d = c.layer_head_dim(layer);
  const VisibleKeys vis = visible_keys(layer, batch, t, part);
  const size_t chunk_floats = static_cast<size_t>(kChunk) * d;
  if (sc.k_tile.size() < chunk_floats) sc.k_tile.resize(chunk_floats);
  if (sc.v_tile.size() < chunk_floats) sc.v_tile.resize(chunk_floats);
  int32_t kv_layer = 0;
  const bool rotated = kv_dtype_rotated(kv_of(layer, &kv_layer).layout().dtype);
  float* krot = nullptr;
  q = turn_queries(layer, q, vis.n_vis, rotated, sc, &krot);

  OnlineAttention att(q, n_q, d, c.attn_scale, out, c.latent_kv() ? c.attn_v_dim() : d);
  KeyWalk walk(*this, layer, batch, t, g, vis, att, sc, krot, rotated);
  if (walk.record) start_recording(att, sc, n_q, vis.v1 - vis.v0);
  walk.walk();
  const std::vector<float>& sinks = model_->weights.layers[static_cast<size_t>(layer)].attn_sinks;
  if (!sinks.empty() && policy_.learned_sinks && (!part || part->part == 0))
    att.add_sink_logits(&sinks[static_cast<size_t>(g) * n_q]);
  if (walk.record) finish_recording(att, sc);
  if (part)
    att.finish_partial(part->m, part->l);
  else
    att.finish();
  // The rotation is linear: a split pass's unnormalised parts can be rotated back before the
  // merge just as the whole output after it.
  if (rotated)
    for (int32_t h = 0; h < n_q; ++h) kvq4::unrotate(out + static_cast<int64_t>(h) * d, d);
}

}  // namespace kvscope
