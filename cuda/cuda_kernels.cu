// Element-wise and per-row kernels of the CUDA forward: embedding lookup, residual add + RMSNorm,
// bias + q/k norm + RoPE + KV cache write, gated activation, copy-on-write of KV blocks.
// Math mirrors cpu/ops.cpp: RMSNorm sums squares in double, RoPE angles by the same f32
// recurrence (kv_math.h), SiLU and tanh-GELU in f32.
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_packed.cuh"

namespace kvscope::cuda {

int32_t kv_codec_elem_bytes(KvCodecId c) {
  switch (c) {
    case KvCodecId::F32:
      return 4;
    case KvCodecId::F16:
    case KvCodecId::BF16:
      return 2;
    case KvCodecId::FP8_E4M3:
    case KvCodecId::FP8_E5M2:
    case KvCodecId::INT8:
      return 1;
  }
  return 0;
}

bool kv_codec_scaled(KvCodecId c) {
  return c == KvCodecId::FP8_E4M3 || c == KvCodecId::FP8_E5M2 || c == KvCodecId::INT8;
}

const char* kv_codec_name(KvCodecId c) {
  switch (c) {
    case KvCodecId::F32:
      return "f32";
    case KvCodecId::F16:
      return "f16";
    case KvCodecId::BF16:
      return "bf16";
    case KvCodecId::FP8_E4M3:
      return "fp8_e4m3";
    case KvCodecId::FP8_E5M2:
      return "fp8_e5m2";
    case KvCodecId::INT8:
      return "int8";
  }
  return "?";
}

namespace {

constexpr int kRowThreads = 256;

template <ActType A>
__global__ void embed_kernel(const typename Act<A>::T* table, const int32_t* tokens, int32_t E, float scale, float* x) {
  const int32_t t = blockIdx.x;
  const typename Act<A>::T* src = table + static_cast<int64_t>(tokens[t]) * E;
  float* dst = x + static_cast<int64_t>(t) * E;
  for (int32_t i = threadIdx.x; i < E; i += blockDim.x) dst[i] = Act<A>::to_f32(src[i]) * scale;
}

// 1 / sqrt(mean(x^2) + eps), mean from a double sum, as core's rms_norm.
__device__ inline float rms_scale(double sum_sq, int32_t n, float eps) {
  return 1.0f / sqrtf(static_cast<float>(sum_sq / n) + eps);
}

template <ActType A>
__global__ void residual_norm_kernel(float* x, float* o, const float* post_w, const float* norm_w,
                                     typename Act<A>::T* xn, const int32_t* rows, int32_t E, float eps) {
  __shared__ double scratch[32];
  const int32_t r = blockIdx.x;
  const int64_t row = rows ? rows[r] : r;
  float* xr = x + row * E;
  if (o) {
    float* orow = o + row * E;
    if (post_w) {
      double ss = 0;
      for (int32_t i = threadIdx.x; i < E; i += blockDim.x) ss += static_cast<double>(orow[i]) * orow[i];
      const float s = rms_scale(block_sum_d(ss, scratch), E, eps);
      for (int32_t i = threadIdx.x; i < E; i += blockDim.x) xr[i] += orow[i] * s * post_w[i];
    } else {
      for (int32_t i = threadIdx.x; i < E; i += blockDim.x) xr[i] += orow[i];
    }
  }
  if (!norm_w) return;
  // Each thread reads back only the elements it wrote: no barrier needed before the sum.
  double ss = 0;
  for (int32_t i = threadIdx.x; i < E; i += blockDim.x) ss += static_cast<double>(xr[i]) * xr[i];
  const float s = rms_scale(block_sum_d(ss, scratch), E, eps);
  typename Act<A>::T* dst = xn + static_cast<int64_t>(r) * E;
  for (int32_t i = threadIdx.x; i < E; i += blockDim.x) dst[i] = Act<A>::from_f32(xr[i] * s * norm_w[i]);
}

// Stores one head vector (in shared memory) at vector index vidx of a cache array, encoding to
// the codec; scaled codecs first compute absmax / qmax. Called by the whole block.
template <KvCodecId C>
__device__ void store_head_vector(const float* sv, int32_t D, KvArray arr, int64_t vidx, float* scratch) {
  using Cd = Codec<C>;
  typename Cd::T* dst = static_cast<typename Cd::T*>(arr.data) + vidx * D;
  if constexpr (Cd::kScaled) {
    float m = 0.0f;
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) m = fmaxf(m, fabsf(sv[d]));
    m = block_max(m, scratch);
    const float scale = kvmath::kv_quant_scale(m, Cd::kQmax);
    if (threadIdx.x == 0) arr.scale[vidx] = scale;
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) dst[d] = Cd::encode(sv[d] / scale);
  } else {
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) dst[d] = Cd::encode(sv[d]);
  }
}

// grid (n_tokens, n_head + n_head_kv): block y < n_head handles q head y in place; the others
// handle kv head y - n_head: K (bias, norm, RoPE) and V (bias) go to the token's slot.
template <KvCodecId C, bool kPacked>
__global__ void qkv_rope_store_kernel(QkvParams p) {
  extern __shared__ float sv[];  // [2][D]
  __shared__ double scratch_d[32];
  __shared__ float scratch_f[32];
  const int32_t t = blockIdx.x, hs = blockIdx.y, D = p.kv.head_dim;
  const int32_t Q = p.n_head * D, KV = p.kv.n_head_kv * D;
  float* row = p.qkv + static_cast<int64_t>(t) * (Q + 2 * KV);
  const bool is_q = hs < p.n_head;
  const int32_t kvh = is_q ? 0 : hs - p.n_head;
  const int32_t off = is_q ? hs * D : Q + kvh * D;
  float* vec = row + off;
  for (int32_t d = threadIdx.x; d < D; d += blockDim.x) sv[d] = vec[d] + (p.bias ? p.bias[off + d] : 0.0f);
  const float* norm_w = is_q ? p.q_norm : p.k_norm;
  if (norm_w) {
    double ss = 0;
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) ss += static_cast<double>(sv[d]) * sv[d];
    const float s = rms_scale(block_sum_d(ss, scratch_d), D, p.eps);
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) sv[d] = sv[d] * s * norm_w[d];
  }
  __syncthreads();
  const int32_t pos = p.positions[t];
  for (int32_t i = threadIdx.x; p.rope && i < p.rope_dim / 2; i += blockDim.x) {
    const float ang = kvmath::rope_angle(pos, i, p.rope_dim, p.rope_base, p.rope_freq_scale);
    const float c = cosf(ang), s = sinf(ang);
    int32_t a, b;
    kvmath::rope_pair(i, p.rope_dim, p.neox, &a, &b);
    const float x0 = sv[a], x1 = sv[b];
    sv[a] = x0 * c - x1 * s;
    sv[b] = x0 * s + x1 * c;
  }
  __syncthreads();
  if (is_q) {
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) vec[d] = sv[d];
    return;
  }
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= static_cast<int64_t>(p.kv.num_blocks) * p.kv.block_size) {
    if (threadIdx.x == 0) raise_error(p.error, kErrSlotOutOfRange);
    return;
  }
  const int32_t blk = kvmath::slot_block(slot, p.kv.block_size), sib = kvmath::slot_offset(slot, p.kv.block_size);
  const int64_t vidx = kvmath::vector_index(blk, kvh, sib, p.kv.n_head_kv, p.kv.block_size);
  const int32_t res = kPacked && p.res_slot ? p.res_slot[t] : -1;
  if constexpr (kPacked)
    packed_store_vector(sv, p.kv, p.k, false, blk, kvh, sib, res);
  else
    store_head_vector<C>(sv, D, p.k, vidx, scratch_f);
  float* sv2 = sv + D;
  const int32_t voff = Q + KV + kvh * D;
  for (int32_t d = threadIdx.x; d < D; d += blockDim.x) sv2[d] = row[voff + d] + (p.bias ? p.bias[voff + d] : 0.0f);
  __syncthreads();
  if constexpr (kPacked)
    packed_store_vector(sv2, p.kv, p.v, true, blk, kvh, sib, res);
  else
    store_head_vector<C>(sv2, D, p.v, vidx, scratch_f);
}

__device__ inline float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ inline float gelu_tanh_f(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kCoef * x * x)));
}

template <ActType A>
__global__ void gated_act_kernel(bool gelu, const float* gu, typename Act<A>::T* h, int32_t n, int32_t F) {
  const int64_t total = static_cast<int64_t>(n) * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / F, f = i % F;
    const float g = gu[t * 2 * F + f], u = gu[t * 2 * F + F + f];
    h[i] = Act<A>::from_f32((gelu ? gelu_tanh_f(g) : silu_f(g)) * u);
  }
}

// grid (n_copies, 2 * n_layer). Tile rows of one (block, head) are contiguous, and head_dim is a
// multiple of 8 so every row run is a whole number of 8-byte words.
__global__ void copy_blocks_kernel(KvPoolView pool, const int32_t* copies, int32_t elem_bytes) {
  const int32_t src = copies[3 * blockIdx.x], dst = copies[3 * blockIdx.x + 1], n_slots = copies[3 * blockIdx.x + 2];
  const int32_t l = blockIdx.y / 2;
  const bool value = blockIdx.y % 2;
  const KvArray a = pool.layer(l, value);
  const KvGeometry& g = pool.kv;
  const int64_t words = static_cast<int64_t>(n_slots) * g.head_dim * elem_bytes / 8;
  for (int32_t h = 0; h < g.n_head_kv; ++h) {
    const int64_t vs = kvmath::vector_index(src, h, 0, g.n_head_kv, g.block_size);
    const int64_t vd = kvmath::vector_index(dst, h, 0, g.n_head_kv, g.block_size);
    const uint2* s = reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(a.data) + vs * g.head_dim * elem_bytes);
    uint2* d = reinterpret_cast<uint2*>(static_cast<uint8_t*>(a.data) + vd * g.head_dim * elem_bytes);
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
    if (a.scale)
      for (int32_t i = threadIdx.x; i < n_slots; i += blockDim.x) a.scale[vd + i] = a.scale[vs + i];
  }
}

// Packed formats: grid (n_copies, 2 * n_layer); a block's tiles of all kv heads are contiguous
// (tile_bytes each, not a multiple of 8 in general: byte copies).
__global__ void copy_packed_blocks_kernel(KvPoolView pool, const int32_t* copies) {
  const int32_t src = copies[3 * blockIdx.x], dst = copies[3 * blockIdx.x + 1];
  const int32_t l = blockIdx.y / 2;
  const bool value = blockIdx.y % 2;
  const KvArray a = pool.layer(l, value);
  const KvGeometry& g = pool.kv;
  const int64_t bytes = g.n_head_kv * g.tile_bytes[value];
  const uint8_t* s = static_cast<const uint8_t*>(a.data) + src * bytes;
  uint8_t* d = static_cast<uint8_t*>(a.data) + dst * bytes;
  for (int64_t i = threadIdx.x; i < bytes; i += blockDim.x) d[i] = s[i];
}

__global__ void codec_encode_kernel(const float* x, int32_t n, uint8_t* e4m3, uint8_t* e5m2, int8_t* i8,
                                    float i8_scale) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  e4m3[i] = Codec<KvCodecId::FP8_E4M3>::encode(x[i]);
  e5m2[i] = Codec<KvCodecId::FP8_E5M2>::encode(x[i]);
  i8[i] = kvmath::f32_to_int8(x[i], i8_scale);
}

// Decodes through load8 (the attention kernels' path: hardware cvt on sm_89+).
__global__ void codec_decode_kernel(const uint8_t* e4m3, const uint8_t* e5m2, int32_t n8, float* e4m3_back,
                                    float* e5m2_back) {
  const int32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= n8) return;
  Codec<KvCodecId::FP8_E4M3>::load8(e4m3 + 8 * g, e4m3_back + 8 * g);
  Codec<KvCodecId::FP8_E5M2>::load8(e5m2 + 8 * g, e5m2_back + 8 * g);
}

}  // namespace

void launch_embed(ActType at, const void* table, const int32_t* tokens, int32_t n, int32_t E, bool embed_scale,
                  float* x, cudaStream_t stream) {
  if (n <= 0) return;
  const float scale = embed_scale ? std::sqrt(static_cast<float>(E)) : 1.0f;
  dispatch_act(at, [&]<ActType A>() {
    embed_kernel<A><<<n, kRowThreads, 0, stream>>>(static_cast<const typename Act<A>::T*>(table), tokens, E, scale, x);
  });
}

void launch_residual_norm(ActType at, float* x, float* o, const float* post_w, const float* norm_w, void* xn,
                          const int32_t* rows, int32_t n, int32_t E, float eps, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_act(at, [&]<ActType A>() {
    residual_norm_kernel<A>
        <<<n, kRowThreads, 0, stream>>>(x, o, post_w, norm_w, static_cast<typename Act<A>::T*>(xn), rows, E, eps);
  });
}

void launch_qkv_rope_store(const QkvParams& p, cudaStream_t stream) {
  if (p.n_tokens <= 0) return;
  const dim3 grid(p.n_tokens, p.n_head + p.kv.n_head_kv);
  const int threads = p.kv.head_dim >= 128 ? 128 : (p.kv.head_dim > 32 ? 64 : 32);
  const size_t smem = 2 * sizeof(float) * p.kv.head_dim;
  if (p.kv.packed != PackedKv::None) {  // one instantiation: the format is read from p.kv at run time
    qkv_rope_store_kernel<KvCodecId::F32, true><<<grid, threads, smem, stream>>>(p);
    return;
  }
  dispatch_codec(p.kv.codec,
                 [&]<KvCodecId C>() { qkv_rope_store_kernel<C, false><<<grid, threads, smem, stream>>>(p); });
}

void launch_gated_act(ActType at, bool gelu, const float* gu, void* h, int32_t n, int32_t F, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * F;
  if (total <= 0) return;
  const int threads = 256;
  const int64_t want = (total + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65536 ? want : 65536);
  dispatch_act(at, [&]<ActType A>() {
    gated_act_kernel<A><<<blocks, threads, 0, stream>>>(gelu, gu, static_cast<typename Act<A>::T*>(h), n, F);
  });
}

void launch_copy_blocks(const KvPoolView& pool, const int32_t* copies, int32_t n_copies, cudaStream_t stream) {
  if (n_copies <= 0) return;
  if (pool.kv.packed != PackedKv::None) {
    copy_packed_blocks_kernel<<<dim3(n_copies, 2 * pool.n_layer), 256, 0, stream>>>(pool, copies);
    return;
  }
  copy_blocks_kernel<<<dim3(n_copies, 2 * pool.n_layer), 256, 0, stream>>>(pool, copies,
                                                                           kv_codec_elem_bytes(pool.kv.codec));
}

void launch_codec_selftest(const float* x, int32_t n, uint8_t* e4m3, uint8_t* e5m2, int8_t* i8, float i8_scale,
                           float* e4m3_back, float* e5m2_back, cudaStream_t stream) {
  if (n <= 0) return;
  codec_encode_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, n, e4m3, e5m2, i8, i8_scale);
  const int32_t n8 = n / 8;
  if (n8 > 0) codec_decode_kernel<<<(n8 + 255) / 256, 256, 0, stream>>>(e4m3, e5m2, n8, e4m3_back, e5m2_back);
}

}  // namespace kvscope::cuda
