// Kernels of the packed 4/2-bit KV formats (int4, rot4, kivi4, kivi2), the CUDA counterpart of
// cpu/cpu_kv_packed.cpp and of CpuBackend::attend_group's packed path:
//  * KIVI block completion: keys per channel over the block, values per token, from the f16
//    residual (the store itself is in cuda_kernels.cu's qkv_rope_store, via cuda_packed.cuh);
//  * paged attention for every token of a step, dequantizing inside the online-softmax loop;
//  * a device/host codec self-test for the GPU suite.
// Simple and correct first, not tuned: attention is one thread block per (token, kv head), no
// split-K, elements decoded one at a time (each re-reads its f16 parameters from cache).
#include <cmath>

#include "cuda_packed.cuh"

namespace kvscope::cuda {

const char* packed_kv_name(PackedKv f) {
  switch (f) {
    case PackedKv::None:
      return "none";
    case PackedKv::INT4:
      return "int4";
    case PackedKv::ROT4:
      return "rot4";
    case PackedKv::KIVI4:
      return "kivi4";
    case PackedKv::KIVI2:
      return "kivi2";
  }
  return "?";
}

namespace {

constexpr int kThreads = 128;
constexpr int32_t kKeys = 32;  // keys per chunk of the attention loop

// ---- KIVI block completion -----------------------------------------------------------------------

// grid (n_complete, 2 * n_kv): one (block, K or V, kv head) tile. Reads the f16 residual rows
// directly from global memory (a tile is up to 128 x 256 elements: too big for shared memory).
__global__ void __launch_bounds__(kThreads) kivi_complete_kernel(KvGeometry g, KvArray k, KvArray v, StepPtrs step) {
  extern __shared__ float s_par[];  // [2][D]: per-channel scale, min (keys)
  const int32_t b = step.kivi_complete[2 * blockIdx.x], r = step.kivi_complete[2 * blockIdx.x + 1];
  const bool is_value = blockIdx.y >= g.n_head_kv;
  const int32_t head = blockIdx.y % g.n_head_kv;
  const KvArray& a = is_value ? v : k;
  const m4::PackedGeom pg = packed_geom(g);
  const int32_t D = g.head_dim, bs = g.block_size;
  const uint16_t* res = residual_row(g, a, r, head, 0);
  uint8_t* tile = packed_tile(g, a, is_value, b, head);
  if (!is_value) {
    float* s = s_par;
    float* mn = s_par + D;
    for (int32_t c = threadIdx.x; c < D; c += blockDim.x) m4::complete_key_channel(pg, res, tile, c, &s[c], &mn[c]);
    __syncthreads();
    for (int32_t idx = threadIdx.x; idx < bs * (D * pg.bits / 8); idx += blockDim.x)
      m4::complete_key_byte(pg, res, tile, idx, s, mn);
    return;
  }
  // Values: one thread per row (groups may share bytes when the group is odd).
  for (int32_t row = threadIdx.x; row < bs; row += blockDim.x) m4::complete_value_row(pg, res, tile, row);
}

// ---- attention ---------------------------------------------------------------------------------

// Walsh-Hadamard transform of n rows (row stride `stride`) of D elements in shared memory, all
// threads, barrier between stages: the same sums as the serial m4::fwht (core's rotate/unrotate).
__device__ inline void fwht_rows(float* rows, int32_t n, int32_t stride, int32_t D) {
  const int32_t half = D / 2;
  for (int32_t len = 1; len < D; len <<= 1) {
    for (int32_t idx = threadIdx.x; idx < n * half; idx += blockDim.x)
      m4::fwht_butterfly(rows + static_cast<int64_t>(idx / half) * stride, len, idx % half);
    __syncthreads();
  }
}
// x <- R x (rotate) or x <- R^T x (unrotate), per row, as m4::rotate / m4::unrotate.
__device__ inline void rotate_rows(float* rows, int32_t n, int32_t stride, int32_t D, bool inverse) {
  const float s = m4::rotation_norm(D);
  __syncthreads();
  if (!inverse) {
    for (int32_t idx = threadIdx.x; idx < n * D; idx += blockDim.x)
      rows[static_cast<int64_t>(idx / D) * stride + idx % D] *= m4::rotation_sign(idx % D);
    __syncthreads();
  }
  fwht_rows(rows, n, stride, D);
  for (int32_t idx = threadIdx.x; idx < n * D; idx += blockDim.x)
    rows[static_cast<int64_t>(idx / D) * stride + idx % D] *= inverse ? s * m4::rotation_sign(idx % D) : s;
  __syncthreads();
}

// RoPE of n rows (stride) by the cos/sin row cs_of_row(r), as core's rope_apply.
template <typename CsOfRow>
__device__ inline void rope_rows(float* rows, int32_t n, int32_t stride, CsOfRow cs_of_row, int32_t n_rot, bool neox) {
  const int32_t half = n_rot / 2;
  __syncthreads();
  for (int32_t idx = threadIdx.x; idx < n * half; idx += blockDim.x) {
    const int32_t r = idx / half, i = idx % half;
    int32_t a, b;
    kvmath::rope_pair(i, n_rot, neox, &a, &b);
    const float* cs = cs_of_row(r);
    const float c = cs[2 * i], s = cs[2 * i + 1];
    float* x = rows + static_cast<int64_t>(r) * stride;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
  __syncthreads();
}

// grid (n_tokens, n_kv); the G = n_head / n_kv q heads of kv head kvh. Visible keys (window and
// sinks, kv_math visible_range) in chunks of kKeys: decode K and V elements into shared memory,
// scores, online-softmax update, output accumulation.
// long-function: one fused kernel, kept whole until a GPU can check a split (no device here).
template <ActType A>
__global__ void __launch_bounds__(kThreads) attn_packed_kernel(AttnParams p) {
  const KvGeometry& g = p.kv;
  const int32_t D = g.head_dim, DK = D + 1, n_kv = g.n_head_kv, G = p.n_head / n_kv;
  const int32_t t = blockIdx.x, kvh = blockIdx.y, h0 = kvh * G;
  const int32_t pos = p.step.positions[t];
  const kvmath::VisibleRange vr = kvmath::visible_range(pos, p.window, p.sinks);
  const int32_t n_vis = vr.count();
  const int32_t si = p.step.seq_index[t];
  const int32_t* table = p.step.tables + p.step.table_offsets[si];
  const int32_t table_len = p.step.table_offsets[si + 1] - p.step.table_offsets[si];
  const bool rot = g.packed == PackedKv::ROT4, sink = p.sink_rope != nullptr;

  extern __shared__ float smem[];
  float* s_q = smem;                                       // [G][D]
  float* s_acc = s_q + G * D;                              // [G][D]
  float* s_k = s_acc + G * D;                              // [kKeys][DK]
  float* s_v = s_k + kKeys * DK;                           // [kKeys][D]
  float* s_p = s_v + kKeys * D;                            // [G][kKeys]
  float* s_m = s_p + G * kKeys;                            // [G]
  float* s_l = s_m + G;                                    // [G]
  float* s_corr = s_l + G;                                 // [G]
  int32_t* s_ok = reinterpret_cast<int32_t*>(s_corr + G);  // [kKeys]

  for (int32_t idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    s_q[idx] = p.q[static_cast<int64_t>(t) * p.q_stride + static_cast<int64_t>(h0) * D + idx];
    s_acc[idx] = 0.0f;
  }
  for (int32_t i = threadIdx.x; i < G; i += blockDim.x) s_m[i] = -INFINITY, s_l[i] = 0.0f;
  // rot4 stores R k, R v: scores use R q. With sinks the keys are turned back before RoPE
  // instead and q only gets RoPE at its cache position (CpuBackend::attend_group).
  if (sink) {
    const float* cs = p.sink_rope + static_cast<int64_t>(n_vis - 1) * p.rope_dim;
    rope_rows(
        s_q, G, D, [cs](int32_t) { return cs; }, p.rope_dim, p.neox);
  } else if (rot) {
    rotate_rows(s_q, G, D, D, false);
  }

  for (int32_t c0 = 0; c0 < n_vis; c0 += kKeys) {
    __syncthreads();  // the previous chunk is consumed, the init above is visible
    const int32_t nk = min(kKeys, n_vis - c0);
    for (int32_t idx = threadIdx.x; idx < kKeys * D; idx += blockDim.x) {
      const int32_t j = idx / D, e = idx % D;
      float kk = 0.0f, vv = 0.0f;
      int32_t ok = 0;
      if (j < nk) {
        const int32_t pk = vr.position(c0 + j), lb = pk / g.block_size;
        const int32_t b = lb < table_len ? table[lb] : -1;
        if (lb >= table_len) {
          if (e == 0) raise_error(p.error, kErrTableOverrun);
        } else if (b < 0 || b >= g.num_blocks) {
          if (e == 0) raise_error(p.error, b < 0 ? kErrDroppedBlock : kErrSlotOutOfRange);
        } else {
          const int32_t sl = pk % g.block_size;
          kk = packed_elem(g, p.k, false, b, kvh, sl, e);
          vv = packed_elem(g, p.v, true, b, kvh, sl, e);
          ok = 1;
        }
      }
      s_k[j * DK + e] = kk;
      s_v[j * D + e] = vv;
      if (e == 0) s_ok[j] = ok;
    }
    if (sink) {  // keys stored before RoPE: back to the plain basis (rot4), then RoPE by cache position
      if (rot) rotate_rows(s_k, kKeys, DK, D, true);
      const AttnParams& pp = p;
      rope_rows(
          s_k, kKeys, DK,
          [&pp, c0, nk](int32_t j) { return pp.sink_rope + static_cast<int64_t>(j < nk ? c0 + j : 0) * pp.rope_dim; },
          p.rope_dim, p.neox);
    }
    __syncthreads();
    for (int32_t idx = threadIdx.x; idx < G * kKeys; idx += blockDim.x) {
      const int32_t gg = idx / kKeys, j = idx % kKeys;
      float sc = -INFINITY;
      if (j < nk && s_ok[j]) {
        const float* qv = s_q + gg * D;
        const float* kv = s_k + j * DK;
        float d = 0.0f;
        for (int32_t e = 0; e < D; ++e) d += qv[e] * kv[e];
        sc = d * p.scale;
      }
      s_p[idx] = sc;
    }
    __syncthreads();
    for (int32_t gg = threadIdx.x; gg < G; gg += blockDim.x) {
      float cm = -INFINITY;
      for (int32_t j = 0; j < kKeys; ++j) cm = fmaxf(cm, s_p[gg * kKeys + j]);
      const float m_old = s_m[gg], m_new = fmaxf(m_old, cm);
      if (m_new == -INFINITY) {
        s_corr[gg] = 1.0f;
        for (int32_t j = 0; j < kKeys; ++j) s_p[gg * kKeys + j] = 0.0f;
      } else {
        const float corr = expf(m_old - m_new);
        float sum = 0.0f;
        for (int32_t j = 0; j < kKeys; ++j) {
          const float e = expf(s_p[gg * kKeys + j] - m_new);
          s_p[gg * kKeys + j] = e;
          sum += e;
        }
        s_l[gg] = s_l[gg] * corr + sum;
        s_m[gg] = m_new;
        s_corr[gg] = corr;
      }
    }
    __syncthreads();
    for (int32_t idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
      const int32_t gg = idx / D, d = idx % D;
      float acc = s_acc[idx] * s_corr[gg];
      for (int32_t j = 0; j < nk; ++j) acc += s_p[gg * kKeys + j] * s_v[j * D + d];
      s_acc[idx] = acc;
    }
  }
  __syncthreads();
  for (int32_t idx = threadIdx.x; idx < G * D; idx += blockDim.x) s_acc[idx] /= s_l[idx / D];
  if (rot) rotate_rows(s_acc, G, D, D, true);  // the output was summed in the rotated basis
  __syncthreads();
  using OT = typename Act<A>::T;
  OT* out = static_cast<OT*>(p.out) + static_cast<int64_t>(t) * p.out_stride + static_cast<int64_t>(h0) * D;
  for (int32_t idx = threadIdx.x; idx < G * D; idx += blockDim.x) out[idx] = Act<A>::from_f32(s_acc[idx]);
}

size_t packed_smem_bytes(int32_t G, int32_t D) {
  return sizeof(float) * (2 * G * D + kKeys * (D + 1) + kKeys * D + G * kKeys + 3 * G) + sizeof(int32_t) * kKeys;
}

// ---- self-test ---------------------------------------------------------------------------------

__global__ void packed_selftest_kernel(const float* x, int32_t n, int32_t d, int32_t g, int32_t bits, uint8_t* r4,
                                       uint8_t* ra, float* y4, float* ya) {
  const int32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  const int64_t b4 = d / 2 + 2 * (d / g), ba = d * bits / 8 + 4 * (d / g);
  m4::encode_int4_row(x + static_cast<int64_t>(r) * d, d, g, r4 + r * b4);
  m4::encode_asym_row(x + static_cast<int64_t>(r) * d, d, g, bits, ra + r * ba);
  for (int32_t i = 0; i < d; ++i) {
    y4[static_cast<int64_t>(r) * d + i] = m4::int4_row_value(r4 + r * b4, d, g, i);
    ya[static_cast<int64_t>(r) * d + i] = m4::asym_row_value(ra + r * ba, d, g, bits, i);
  }
}

}  // namespace

void launch_kivi_complete(const KvGeometry& kv, KvArray k, KvArray v, const StepPtrs& step, cudaStream_t stream) {
  if (step.n_complete <= 0 || !packed_kv_kivi(kv.packed)) return;
  kivi_complete_kernel<<<dim3(step.n_complete, 2 * kv.n_head_kv), kThreads, 2 * sizeof(float) * kv.head_dim, stream>>>(
      kv, k, v, step);
}

void launch_attention_packed(ActType at, const AttnParams& p, cudaStream_t stream) {
  if (p.step.n_tokens <= 0) return;
  const int32_t G = p.n_head / p.kv.n_head_kv;
  const size_t smem = packed_smem_bytes(G, p.kv.head_dim);
  const dim3 grid(p.step.n_tokens, p.kv.n_head_kv);
  dispatch_act(at, [&]<ActType A>() {
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(attn_packed_kernel<A>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    attn_packed_kernel<A><<<grid, kThreads, smem, stream>>>(p);
  });
}

void launch_packed_selftest(const float* x, int32_t n, int32_t d, int32_t g, int32_t bits, uint8_t* rows_int4,
                            uint8_t* rows_asym, float* y_int4, float* y_asym, cudaStream_t stream) {
  if (n <= 0) return;
  packed_selftest_kernel<<<(n + 63) / 64, 64, 0, stream>>>(x, n, d, g, bits, rows_int4, rows_asym, y_int4, y_asym);
}

}  // namespace kvscope::cuda
