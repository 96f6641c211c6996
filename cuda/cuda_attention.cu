// Paged attention over the KV block pool, walking each sequence's block table (never a
// contiguous copy), honouring the layer's sliding window and the policy's sinks:
//
//  * decode (one query token of a sequence): vLLM-v2-style split-K. One thread block per
//    (token, kv head, chunk of <= 8 of its q heads, partition of 512 visible positions). GQA
//    heads that share a kv head are served by the same block, so each K/V vector is read once.
//    The block first walks the block table for its partition into shared memory (one vector
//    index per key, -1 for a missing block). Keys are spread over warps; within a warp a key is read by lanes_per_key lanes, 8 elements
//    (16 bytes for f16) each. Partial (max, sum, unnormalised output) go to a workspace that a
//    reduce kernel merges; a token with a single partition writes its output directly.
//  * prefill (a chunk of consecutive tokens of one sequence): one thread block per (tile of 16
//    queries, q head); K/V of the tile's visible union are staged through shared memory in
//    chunks, masked per query, with an online softmax. Simple and correct, not tuned.
//
// The KV element type is the Codec template parameter (f32/f16/bf16 now, fp8/int8 ready):
// scaled codecs fold the per-vector scale into the score (K) and the probability (V).
#include <cmath>

#include "cuda_common.cuh"

namespace kvscope::cuda {

int64_t attention_workspace_floats(int32_t n_decode, int32_t n_head, int32_t max_parts, int32_t head_dim) {
  return static_cast<int64_t>(n_decode) * n_head * max_parts * (2 + head_dim);
}

namespace {

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kKeyUnroll = 2;  // keys in flight per lane group per iteration

struct TokenSeq {
  const int32_t* table;
  int32_t table_len;
};

__device__ inline TokenSeq token_seq(const StepPtrs& s, int32_t t) {
  const int32_t si = s.seq_index[t];
  const int32_t b = s.table_offsets[si], e = s.table_offsets[si + 1];
  return {s.tables + b, e - b};
}

// Vector index of visible position pk for kv head kvh, or -1 (error raised) if the table has no
// block there.
__device__ inline int64_t key_vector(const TokenSeq& ts, int32_t pk, int32_t kvh, const KvGeometry& g, int32_t* err) {
  const int32_t lb = pk / g.block_size;
  if (lb >= ts.table_len) {
    raise_error(err, kErrTableOverrun);
    return -1;
  }
  const int32_t b = ts.table[lb];
  if (b < 0 || b >= g.num_blocks) {
    raise_error(err, b < 0 ? kErrDroppedBlock : kErrSlotOutOfRange);
    return -1;
  }
  return kvmath::vector_index(b, kvh, pk % g.block_size, g.n_head_kv, g.block_size);
}

// Rotates q head rows in shared memory (row stride D) by the RoPE cos/sin row cs_of_row(r), as
// core's rope_apply.
template <typename CsOfRow>
__device__ inline void rope_rows_smem(float* rows, int32_t n_rows, int32_t D, CsOfRow cs_of_row, int32_t n_rot,
                                      bool neox) {
  const int32_t half = n_rot / 2;
  for (int32_t idx = threadIdx.x; idx < n_rows * half; idx += blockDim.x) {
    const int32_t r = idx / half, i = idx % half;
    int32_t a, b;
    kvmath::rope_pair(i, n_rot, neox, &a, &b);
    const float* cs = cs_of_row(r);
    const float c = cs[2 * i], s = cs[2 * i + 1];
    float* x = rows + static_cast<int64_t>(r) * D;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

// Rotates the 8 elements a lane holds (chunk lk of a head vector) by the cos/sin row cs. Normal
// RoPE pairs stay inside a chunk; NEOX pairs (i, i + n_rot/2) sit in chunks half/8 apart (n_rot a
// multiple of 16), held by lanes of the same key group, so the partner values come by shuffle
// (all lanes must call this).
__device__ inline void rope_chunk(float* x, int32_t lk, int32_t lane, const float* cs, int32_t n_rot, bool neox) {
  const int32_t d0 = lk * 8;
  if (!neox) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int32_t d = d0 + 2 * k;
      if (d < n_rot) {
        const float c = cs[d], s = cs[d + 1], x0 = x[2 * k], x1 = x[2 * k + 1];
        x[2 * k] = x0 * c - x1 * s;
        x[2 * k + 1] = x0 * s + x1 * c;
      }
    }
    return;
  }
  const int32_t half = n_rot / 2;
  const int32_t off = half / 8;  // n_rot % 16 == 0 (checked on the host)
  const bool is_a = d0 < half, is_b = !is_a && d0 < n_rot;
  const int32_t src = is_a ? lane + off : (is_b ? lane - off : lane);
  float partner[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) partner[e] = __shfl_sync(0xffffffffu, x[e], src);
  if (is_a) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int32_t i = d0 + e;
      x[e] = x[e] * cs[2 * i] - partner[e] * cs[2 * i + 1];
    }
  } else if (is_b) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int32_t i = d0 + e - half;
      x[e] = partner[e] * cs[2 * i + 1] + x[e] * cs[2 * i];
    }
  }
}

// long-function: one fused kernel, kept whole until a GPU can check a split (no device here).
template <KvCodecId C, ActType A, int GMAX>
__global__ void __launch_bounds__(kAttnThreads) attn_decode_kernel(AttnParams p) {
  using Cd = Codec<C>;
  using KT = typename Cd::T;
  const KvGeometry& g = p.kv;
  const int32_t D = g.head_dim, n_kv = g.n_head_kv;
  const int32_t di = blockIdx.x / n_kv, kvh = blockIdx.x % n_kv;
  const int32_t t = p.step.decode_tokens[di];
  const int32_t G = p.n_head / n_kv;
  const int32_t g0 = blockIdx.y * GMAX;
  const int32_t ng = min(GMAX, G - g0);
  const int32_t h0 = kvh * G + g0;
  const int32_t pos = p.step.positions[t];
  const kvmath::VisibleRange vr = kvmath::visible_range(pos, p.window, p.sinks);
  const int32_t n_vis = vr.count();
  const int32_t n_parts = kvmath::num_partitions(n_vis, kDecodePartition);
  const int32_t part = blockIdx.z;
  if (part >= n_parts) return;
  const int32_t i0 = part * kDecodePartition, i1 = min(n_vis, i0 + kDecodePartition), n_keys = i1 - i0;
  const TokenSeq ts = token_seq(p.step, t);

  extern __shared__ float smem[];
  float* s_q = smem;                                                              // [GMAX][D]
  float* s_out = s_q + GMAX * D;                                                  // [GMAX][D]
  float* s_logit = s_out + GMAX * D;                                              // [GMAX][kDecodePartition]
  int64_t* s_vi = reinterpret_cast<int64_t*>(s_logit + GMAX * kDecodePartition);  // [kDecodePartition]
  __shared__ float s_red[kAttnWarps][GMAX];
  __shared__ float s_max[GMAX], s_sum[GMAX];

  for (int32_t idx = threadIdx.x; idx < GMAX * D; idx += kAttnThreads) {
    const int32_t gg = idx / D;
    s_q[idx] = gg < ng ? p.q[static_cast<int64_t>(t) * p.q_stride + static_cast<int64_t>(h0 + gg) * D + idx % D] : 0.0f;
    s_out[idx] = 0.0f;
  }
  // Walk the block table once: vector index of every key of the partition (-1: missing block).
  for (int32_t j = threadIdx.x; j < n_keys; j += kAttnThreads)
    s_vi[j] = key_vector(ts, vr.position(i0 + j), kvh, g, p.error);
  __syncthreads();
  const bool sink = p.sink_rope != nullptr;
  if (sink) {  // the query sits at the last cache position
    const float* cs = p.sink_rope + static_cast<int64_t>(n_vis - 1) * p.rope_dim;
    rope_rows_smem(
        s_q, GMAX, D, [cs](int32_t) { return cs; }, p.rope_dim, p.neox);
    __syncthreads();
  }

  const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t chunks = D / 8;  // 8-element pieces of a head vector (<= 32)
  int32_t lpk = 1;               // lanes per key: chunks rounded up to a power of two
  while (lpk < chunks) lpk <<= 1;
  const int32_t kpw = 32 / lpk;  // keys per warp at once
  const int32_t lk = lane & (lpk - 1), ks = lane / lpk;
  const bool active = lk < chunks;
  const KT* kc = static_cast<const KT*>(p.k.data);
  const KT* vc = static_cast<const KT*>(p.v.data);
  const int32_t keys_per_warp_iter = kpw * kKeyUnroll;

  // Phase 1: scores q.k * scale for this partition's keys.
  {
    float qf[GMAX][8];
#pragma unroll
    for (int gg = 0; gg < GMAX; ++gg)
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[gg][e] = active ? s_q[gg * D + lk * 8 + e] : 0.0f;
    for (int32_t base = i0 + warp * keys_per_warp_iter; base < i1; base += kAttnWarps * keys_per_warp_iter) {
      float kv[kKeyUnroll][8];
      float ksc[kKeyUnroll];
      bool ok[kKeyUnroll];
#pragma unroll
      for (int u = 0; u < kKeyUnroll; ++u) {
        const int32_t i = base + u * kpw + ks;
        ok[u] = false;
        ksc[u] = 1.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) kv[u][e] = 0.0f;
        if (i < i1) {
          const int64_t vi = s_vi[i - i0];
          if (vi >= 0) {
            ok[u] = true;
            if (active) Cd::load8(kc + vi * D + lk * 8, kv[u]);
            if constexpr (Cd::kScaled) ksc[u] = p.k.scale[vi];
          }
        }
      }
      if (sink) {  // key i sits at cache position i
#pragma unroll
        for (int u = 0; u < kKeyUnroll; ++u) {
          const int32_t i = base + u * kpw + ks;
          rope_chunk(kv[u], lk, lane, p.sink_rope + static_cast<int64_t>(ok[u] ? i : 0) * p.rope_dim, p.rope_dim,
                     p.neox);
        }
      }
#pragma unroll
      for (int u = 0; u < kKeyUnroll; ++u) {
        const int32_t i = base + u * kpw + ks;
#pragma unroll
        for (int gg = 0; gg < GMAX; ++gg) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e) d += qf[gg][e] * kv[u][e];
          for (int32_t o = lpk >> 1; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
          if (lk == 0 && i < i1) s_logit[gg * kDecodePartition + (i - i0)] = ok[u] ? d * p.scale * ksc[u] : -INFINITY;
        }
      }
    }
  }
  __syncthreads();

  // Phase 2: softmax statistics of the partition, per q head.
  {
    float m[GMAX];
#pragma unroll
    for (int gg = 0; gg < GMAX; ++gg) m[gg] = -INFINITY;
    for (int32_t j = threadIdx.x; j < n_keys; j += kAttnThreads)
#pragma unroll
      for (int gg = 0; gg < GMAX; ++gg) m[gg] = fmaxf(m[gg], s_logit[gg * kDecodePartition + j]);
#pragma unroll
    for (int gg = 0; gg < GMAX; ++gg) {
      m[gg] = warp_max(m[gg]);
      if (lane == 0) s_red[warp][gg] = m[gg];
    }
    __syncthreads();
    if (threadIdx.x < GMAX) {
      float mm = -INFINITY;
      for (int w = 0; w < kAttnWarps; ++w) mm = fmaxf(mm, s_red[w][threadIdx.x]);
      s_max[threadIdx.x] = mm;
    }
    __syncthreads();
    float sum[GMAX];
#pragma unroll
    for (int gg = 0; gg < GMAX; ++gg) sum[gg] = 0.0f;
    for (int32_t j = threadIdx.x; j < n_keys; j += kAttnThreads)
#pragma unroll
      for (int gg = 0; gg < GMAX; ++gg) {
        const float e = expf(s_logit[gg * kDecodePartition + j] - s_max[gg]);
        s_logit[gg * kDecodePartition + j] = e;
        sum[gg] += e;
      }
    __syncthreads();  // s_red reuse
#pragma unroll
    for (int gg = 0; gg < GMAX; ++gg) {
      sum[gg] = warp_sum(sum[gg]);
      if (lane == 0) s_red[warp][gg] = sum[gg];
    }
    __syncthreads();
    if (threadIdx.x < GMAX) {
      float ss = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) ss += s_red[w][threadIdx.x];
      s_sum[threadIdx.x] = ss;
    }
    __syncthreads();
  }

  // Phase 3: unnormalised output sum_j exp(s_j - m) * v_j.
  {
    float acc[GMAX][8];
#pragma unroll
    for (int gg = 0; gg < GMAX; ++gg)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[gg][e] = 0.0f;
    for (int32_t base = i0 + warp * keys_per_warp_iter; base < i1; base += kAttnWarps * keys_per_warp_iter) {
      float vv[kKeyUnroll][8];
      float w[kKeyUnroll];
      bool ok[kKeyUnroll];
#pragma unroll
      for (int u = 0; u < kKeyUnroll; ++u) {
        const int32_t i = base + u * kpw + ks;
        w[u] = 0.0f;
        ok[u] = false;
#pragma unroll
        for (int e = 0; e < 8; ++e) vv[u][e] = 0.0f;
        if (i < i1) {
          const int64_t vi = s_vi[i - i0];
          if (vi >= 0) {
            ok[u] = true;
            if (active) Cd::load8(vc + vi * D + lk * 8, vv[u]);
            w[u] = 1.0f;
            if constexpr (Cd::kScaled) w[u] = p.v.scale[vi];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kKeyUnroll; ++u) {
        const int32_t i = base + u * kpw + ks;
        if (i < i1 && ok[u]) {
#pragma unroll
          for (int gg = 0; gg < GMAX; ++gg) {
            const float pw = s_logit[gg * kDecodePartition + (i - i0)] * w[u];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[gg][e] += pw * vv[u][e];
          }
        }
      }
    }
    // Lanes holding the same chunk (same lk) in different key slots of the warp: sum them.
#pragma unroll
    for (int gg = 0; gg < GMAX; ++gg)
#pragma unroll
      for (int e = 0; e < 8; ++e)
        for (int32_t o = lpk; o < 32; o <<= 1) acc[gg][e] += __shfl_xor_sync(0xffffffffu, acc[gg][e], o);
    if (ks == 0 && active)
#pragma unroll
      for (int gg = 0; gg < GMAX; ++gg)
#pragma unroll
        for (int e = 0; e < 8; ++e) atomicAdd(&s_out[gg * D + lk * 8 + e], acc[gg][e]);
  }
  __syncthreads();

  using OT = typename Act<A>::T;
  if (n_parts == 1) {
    OT* out = static_cast<OT*>(p.out);
    for (int32_t idx = threadIdx.x; idx < ng * D; idx += kAttnThreads) {
      const int32_t gg = idx / D;
      out[static_cast<int64_t>(t) * p.out_stride + static_cast<int64_t>(h0 + gg) * D + idx % D] =
          Act<A>::from_f32(s_out[idx] / s_sum[gg]);
    }
  } else {
    for (int32_t idx = threadIdx.x; idx < ng * D; idx += kAttnThreads) {
      const int32_t gg = idx / D;
      const int64_t ws = (static_cast<int64_t>(di) * p.n_head + h0 + gg) * p.part_stride + part;
      p.part_o[ws * D + idx % D] = s_out[idx];
    }
    if (threadIdx.x < ng) {
      const int64_t ws = (static_cast<int64_t>(di) * p.n_head + h0 + threadIdx.x) * p.part_stride + part;
      p.part_ml[2 * ws] = s_max[threadIdx.x];
      p.part_ml[2 * ws + 1] = s_sum[threadIdx.x];
    }
  }
}

// Merges the partitions of one (decode token, q head): out = sum_p e^(m_p - M) o_p / sum_p e^(m_p - M) s_p.
template <ActType A>
__global__ void __launch_bounds__(kAttnThreads) attn_reduce_kernel(AttnParams p) {
  extern __shared__ float s_w[];  // [part_stride]
  __shared__ float scratch[32];
  __shared__ double scratch_d[32];
  const int32_t di = blockIdx.x / p.n_head, h = blockIdx.x % p.n_head, D = p.kv.head_dim;
  const int32_t t = p.step.decode_tokens[di];
  const kvmath::VisibleRange vr = kvmath::visible_range(p.step.positions[t], p.window, p.sinks);
  const int32_t n_parts = kvmath::num_partitions(vr.count(), kDecodePartition);
  if (n_parts <= 1) return;
  const int64_t ws0 = (static_cast<int64_t>(di) * p.n_head + h) * p.part_stride;
  float m = -INFINITY;
  for (int32_t q = threadIdx.x; q < n_parts; q += kAttnThreads) m = fmaxf(m, p.part_ml[2 * (ws0 + q)]);
  m = block_max(m, scratch);
  double s = 0.0;
  for (int32_t q = threadIdx.x; q < n_parts; q += kAttnThreads) {
    const float w = expf(p.part_ml[2 * (ws0 + q)] - m);
    s_w[q] = w;
    s += static_cast<double>(w) * p.part_ml[2 * (ws0 + q) + 1];
  }
  const float inv = static_cast<float>(1.0 / block_sum_d(s, scratch_d));  // block_sum_d syncs: s_w is visible
  using OT = typename Act<A>::T;
  OT* out = static_cast<OT*>(p.out) + static_cast<int64_t>(t) * p.out_stride + static_cast<int64_t>(h) * D;
  for (int32_t d = threadIdx.x; d < D; d += kAttnThreads) {
    float acc = 0.0f;
    for (int32_t q = 0; q < n_parts; ++q) acc += s_w[q] * p.part_o[(ws0 + q) * D + d];
    out[d] = Act<A>::from_f32(acc * inv);
  }
}

constexpr int32_t kPrefillKeys = 16;  // keys staged per chunk

// long-function: one fused kernel, kept whole until a GPU can check a split (no device here).
template <KvCodecId C, ActType A>
__global__ void __launch_bounds__(kAttnThreads) attn_prefill_kernel(AttnParams p) {
  using Cd = Codec<C>;
  using KT = typename Cd::T;
  constexpr int32_t QT = kPrefillTile, KC = kPrefillKeys;
  const KvGeometry& g = p.kv;
  const int32_t D = g.head_dim, DK = D + 1;  // K rows padded: scores read K across rows
  const int32_t t0 = p.step.prefill_tiles[2 * blockIdx.x], nq = p.step.prefill_tiles[2 * blockIdx.x + 1];
  const int32_t h = blockIdx.y, kvh = h / (p.n_head / g.n_head_kv);
  const int32_t pos0 = p.step.positions[t0];
  const kvmath::VisibleRange u = kvmath::visible_union(pos0, pos0 + nq - 1, p.window, p.sinks);
  const int32_t n_keys = u.count();
  const TokenSeq ts = token_seq(p.step, t0);

  extern __shared__ float smem[];
  float* s_q = smem;                                          // [QT][D]
  float* s_acc = s_q + QT * D;                                // [QT][D]
  float* s_k = s_acc + QT * D;                                // [KC][DK]
  float* s_v = s_k + KC * DK;                                 // [KC][D]
  float* s_p = s_v + KC * D;                                  // [QT][KC]
  float* s_m = s_p + QT * KC;                                 // [QT]
  float* s_l = s_m + QT;                                      // [QT]
  float* s_corr = s_l + QT;                                   // [QT]
  int32_t* s_kpos = reinterpret_cast<int32_t*>(s_corr + QT);  // [KC]

  for (int32_t idx = threadIdx.x; idx < QT * D; idx += kAttnThreads) {
    const int32_t qi = idx / D;
    s_q[idx] = qi < nq ? p.q[static_cast<int64_t>(t0 + qi) * p.q_stride + static_cast<int64_t>(h) * D + idx % D] : 0.0f;
    s_acc[idx] = 0.0f;
  }
  if (threadIdx.x < QT) {
    s_m[threadIdx.x] = -INFINITY;
    s_l[threadIdx.x] = 0.0f;
  }
  const KT* kc = static_cast<const KT*>(p.k.data);
  const KT* vc = static_cast<const KT*>(p.v.data);
  const int32_t chunks = D / 8;
  const bool sink = p.sink_rope != nullptr;
  if (sink) {  // each query at its own last cache position
    __syncthreads();
    const AttnParams& pp = p;
    rope_rows_smem(
        s_q, QT, D,
        [&pp, pos0, nq](int32_t qi) {
          const int32_t cp = qi < nq ? kvmath::visible_range(pos0 + qi, pp.window, pp.sinks).count() - 1 : 0;
          return pp.sink_rope + static_cast<int64_t>(cp) * pp.rope_dim;
        },
        p.rope_dim, p.neox);
  }

  for (int32_t c0 = 0; c0 < n_keys; c0 += KC) {
    __syncthreads();  // the previous chunk is consumed (and the init above is visible)
    for (int32_t idx = threadIdx.x; idx < KC * chunks; idx += kAttnThreads) {
      const int32_t j = idx / chunks, ch = idx % chunks, i = c0 + j;
      float kk[8] = {0, 0, 0, 0, 0, 0, 0, 0}, vv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int32_t kp = -1;
      if (i < n_keys) {
        const int32_t pk = u.position(i);
        const int64_t vi = key_vector(ts, pk, kvh, g, ch == 0 ? p.error : nullptr);
        if (vi >= 0) {
          kp = pk;
          Cd::load8(kc + vi * D + ch * 8, kk);
          Cd::load8(vc + vi * D + ch * 8, vv);
          if constexpr (Cd::kScaled) {
            const float ks = p.k.scale[vi], vs = p.v.scale[vi];
#pragma unroll
            for (int e = 0; e < 8; ++e) kk[e] *= ks, vv[e] *= vs;
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        s_k[j * DK + ch * 8 + e] = kk[e];
        s_v[j * D + ch * 8 + e] = vv[e];
      }
      if (ch == 0) s_kpos[j] = kp;
    }
    __syncthreads();
    for (int32_t idx = threadIdx.x; idx < QT * KC; idx += kAttnThreads) {
      const int32_t qi = idx / KC, j = idx % KC, kp = s_kpos[j];
      float sc = -INFINITY;
      if (qi < nq && kp >= 0 && kvmath::is_visible(pos0 + qi, kp, p.window, p.sinks)) {
        const float* qv = s_q + qi * D;
        const float* kv = s_k + j * DK;
        float d = 0.0f;
        if (sink) {  // rotate the key to its position in this query's cache
          const kvmath::VisibleRange vq = kvmath::visible_range(pos0 + qi, p.window, p.sinks);
          const float* cs = p.sink_rope + static_cast<int64_t>(kvmath::cache_position(vq, kp)) * p.rope_dim;
          for (int32_t i = 0; i < p.rope_dim / 2; ++i) {
            int32_t a, b;
            kvmath::rope_pair(i, p.rope_dim, p.neox, &a, &b);
            const float c = cs[2 * i], s = cs[2 * i + 1];
            d += qv[a] * (kv[a] * c - kv[b] * s) + qv[b] * (kv[a] * s + kv[b] * c);
          }
          for (int32_t e = p.rope_dim; e < D; ++e) d += qv[e] * kv[e];
        } else {
          for (int32_t e = 0; e < D; ++e) d += qv[e] * kv[e];
        }
        sc = d * p.scale;
      }
      s_p[idx] = sc;
    }
    __syncthreads();
    if (threadIdx.x < QT) {
      const int32_t qi = threadIdx.x;
      float cm = -INFINITY;
      for (int32_t j = 0; j < KC; ++j) cm = fmaxf(cm, s_p[qi * KC + j]);
      const float m_old = s_m[qi], m_new = fmaxf(m_old, cm);
      if (m_new == -INFINITY) {  // nothing visible yet for this query
        s_corr[qi] = 1.0f;
        for (int32_t j = 0; j < KC; ++j) s_p[qi * KC + j] = 0.0f;
      } else {
        const float corr = expf(m_old - m_new);
        float sum = 0.0f;
        for (int32_t j = 0; j < KC; ++j) {
          const float e = expf(s_p[qi * KC + j] - m_new);
          s_p[qi * KC + j] = e;
          sum += e;
        }
        s_l[qi] = s_l[qi] * corr + sum;
        s_m[qi] = m_new;
        s_corr[qi] = corr;
      }
    }
    __syncthreads();
    for (int32_t idx = threadIdx.x; idx < QT * D; idx += kAttnThreads) {
      const int32_t qi = idx / D, d = idx % D;
      float a = s_acc[idx] * s_corr[qi];
#pragma unroll 4
      for (int32_t j = 0; j < KC; ++j) a += s_p[qi * KC + j] * s_v[j * D + d];
      s_acc[idx] = a;
    }
  }
  __syncthreads();
  using OT = typename Act<A>::T;
  OT* out = static_cast<OT*>(p.out);
  for (int32_t idx = threadIdx.x; idx < nq * D; idx += kAttnThreads) {
    const int32_t qi = idx / D;
    out[static_cast<int64_t>(t0 + qi) * p.out_stride + static_cast<int64_t>(h) * D + idx % D] =
        Act<A>::from_f32(s_acc[idx] / s_l[qi]);
  }
}

size_t decode_smem_bytes(int gmax, int32_t D) {
  return sizeof(float) * (2 * gmax * D + gmax * kDecodePartition) + sizeof(int64_t) * kDecodePartition;
}

size_t prefill_smem_bytes(int32_t D) {
  constexpr int32_t QT = kPrefillTile, KC = kPrefillKeys;
  return sizeof(float) * (2 * QT * D + KC * (D + 1) + KC * D + QT * KC + 3 * QT) + sizeof(int32_t) * KC;
}

template <KvCodecId C, ActType A, int GMAX>
void launch_decode_g(const AttnParams& p, cudaStream_t stream) {
  const int32_t G = p.n_head / p.kv.n_head_kv;
  const dim3 grid(p.step.n_decode * p.kv.n_head_kv, (G + GMAX - 1) / GMAX, p.max_parts);
  attn_decode_kernel<C, A, GMAX><<<grid, kAttnThreads, decode_smem_bytes(GMAX, p.kv.head_dim), stream>>>(p);
}

}  // namespace

void launch_attention_decode(ActType at, const AttnParams& p, cudaStream_t stream) {
  if (p.step.n_decode <= 0 || p.max_parts <= 0) return;
  const int32_t G = p.n_head / p.kv.n_head_kv;
  dispatch_codec(p.kv.codec, [&]<KvCodecId C>() {
    dispatch_act(at, [&]<ActType A>() {
      if (G <= 1)
        launch_decode_g<C, A, 1>(p, stream);
      else if (G <= 2)
        launch_decode_g<C, A, 2>(p, stream);
      else if (G <= 4)
        launch_decode_g<C, A, 4>(p, stream);
      else
        launch_decode_g<C, A, 8>(p, stream);
    });
  });
  if (p.max_parts > 1) {
    dispatch_act(at, [&]<ActType A>() {
      attn_reduce_kernel<A><<<p.step.n_decode * p.n_head, kAttnThreads, sizeof(float) * p.part_stride, stream>>>(p);
    });
  }
}

void launch_attention(ActType at, const AttnParams& p, cudaStream_t stream) {
  launch_attention_decode(at, p, stream);
  if (p.step.n_tiles <= 0) return;
  const size_t smem = prefill_smem_bytes(p.kv.head_dim);
  const dim3 grid(p.step.n_tiles, p.n_head);
  dispatch_codec(p.kv.codec, [&]<KvCodecId C>() {
    dispatch_act(at, [&]<ActType A>() {
      if (smem > 48 * 1024)
        cudaFuncSetAttribute(attn_prefill_kernel<C, A>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
      attn_prefill_kernel<C, A><<<grid, kAttnThreads, smem, stream>>>(p);
    });
  });
}

}  // namespace kvscope::cuda
