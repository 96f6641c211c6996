#pragma once
// Device-side building blocks shared by the kernel translation units: activation types, KV
// codecs (the dtype template parameter of cache-write and attention), warp/block reductions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda_kernels.cuh"
#include "kv_math.h"

namespace kvscope::cuda {

// ---- activation / weight element types ------------------------------------------------------

template <ActType A>
struct Act;
template <>
struct Act<ActType::F16> {
  using T = __half;
  __device__ static T from_f32(float x) { return __float2half_rn(x); }
  __device__ static float to_f32(T x) { return __half2float(x); }
};
template <>
struct Act<ActType::BF16> {
  using T = __nv_bfloat16;
  __device__ static T from_f32(float x) { return __float2bfloat16_rn(x); }
  __device__ static float to_f32(T x) { return __bfloat162float(x); }
};

// ---- KV codecs ------------------------------------------------------------------------------
// Each codec: storage type T; kScaled (one f32 scale per head vector, value = decode * scale);
// kQmax (code range for the scale); encode(x) of an already scaled value; decode(code);
// load8(p, out): 8 consecutive elements (p is 8-element aligned: head_dim % 8 == 0).

template <KvCodecId C>
struct Codec;

template <>
struct Codec<KvCodecId::F32> {
  using T = float;
  static constexpr bool kScaled = false;
  static constexpr float kQmax = 1.0f;
  __device__ static T encode(float x) { return x; }
  __device__ static float decode(T v) { return v; }
  __device__ static void load8(const T* p, float* out) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

template <>
struct Codec<KvCodecId::F16> {
  using T = __half;
  static constexpr bool kScaled = false;
  static constexpr float kQmax = 1.0f;
  __device__ static T encode(float x) { return __float2half_rn(x); }
  __device__ static float decode(T v) { return __half2float(v); }
  __device__ static void load8(const T* p, float* out) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x, out[2 * i + 1] = f.y;
    }
  }
};

template <>
struct Codec<KvCodecId::BF16> {
  using T = __nv_bfloat16;
  static constexpr bool kScaled = false;
  static constexpr float kQmax = 1.0f;
  __device__ static T encode(float x) { return __float2bfloat16_rn(x); }
  __device__ static float decode(T v) { return __bfloat162float(v); }
  __device__ static void load8(const T* p, float* out) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      out[2 * i] = f.x, out[2 * i + 1] = f.y;
    }
  }
};

// fp8: encode with kv_math (bit-exact with the host, saturating); the hot decode path uses the
// hardware cvt on sm_89+ (exact: every fp8 value is an f16 value; only NaN payloads differ).
template <__nv_fp8_interpretation_t kInterp>
__device__ inline void fp8_load8(const uint8_t* p, float* out) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const uint16_t* pairs = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pairs[i]), kInterp);
    const float2 f = __half22float2(__half2(hr));
    out[2 * i] = f.x, out[2 * i + 1] = f.y;
  }
}

template <>
struct Codec<KvCodecId::FP8_E4M3> {
  using T = uint8_t;
  static constexpr bool kScaled = true;
  static constexpr float kQmax = kvmath::kFp8E4M3Max;
  __device__ static T encode(float x) { return kvmath::f32_to_fp8_e4m3(x, kvmath::Fp8Overflow::Saturate); }
  __device__ static float decode(T v) { return kvmath::fp8_e4m3_to_f32(v); }
  __device__ static void load8(const T* p, float* out) { fp8_load8<__NV_E4M3>(p, out); }
};

template <>
struct Codec<KvCodecId::FP8_E5M2> {
  using T = uint8_t;
  static constexpr bool kScaled = true;
  static constexpr float kQmax = kvmath::kFp8E5M2Max;
  // IEEE overflow, as the CPU backend (kv_quant.h); x / scale never overflows anyway.
  __device__ static T encode(float x) { return kvmath::f32_to_fp8_e5m2(x, kvmath::Fp8Overflow::Ieee); }
  __device__ static float decode(T v) { return kvmath::fp8_e5m2_to_f32(v); }
  __device__ static void load8(const T* p, float* out) { fp8_load8<__NV_E5M2>(p, out); }
};

template <>
struct Codec<KvCodecId::INT8> {
  using T = int8_t;
  static constexpr bool kScaled = true;
  static constexpr float kQmax = kvmath::kInt8Max;
  __device__ static T encode(float x) { return kvmath::f32_to_int8(x, 1.0f); }
  __device__ static float decode(T v) { return static_cast<float>(v); }
  __device__ static void load8(const T* p, float* out) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const int8_t* b = reinterpret_cast<const int8_t*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = static_cast<float>(b[i]);
  }
};

// Calls f.template operator()<C>() for the runtime codec id (one switch, every instantiation).
template <typename F>
inline void dispatch_codec(KvCodecId c, F&& f) {
  switch (c) {
    case KvCodecId::F32:
      f.template operator()<KvCodecId::F32>();
      break;
    case KvCodecId::F16:
      f.template operator()<KvCodecId::F16>();
      break;
    case KvCodecId::BF16:
      f.template operator()<KvCodecId::BF16>();
      break;
    case KvCodecId::FP8_E4M3:
      f.template operator()<KvCodecId::FP8_E4M3>();
      break;
    case KvCodecId::FP8_E5M2:
      f.template operator()<KvCodecId::FP8_E5M2>();
      break;
    case KvCodecId::INT8:
      f.template operator()<KvCodecId::INT8>();
      break;
  }
}
template <typename F>
inline void dispatch_act(ActType a, F&& f) {
  if (a == ActType::F16)
    f.template operator()<ActType::F16>();
  else
    f.template operator()<ActType::BF16>();
}

// ---- reductions -----------------------------------------------------------------------------

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `scratch` holds 32 values; the function syncs, so it may be reused right after.
__device__ inline double block_sum_d(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum_d(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double t = lane < n_warps ? scratch[lane] : 0.0;
  return warp_sum_d(t);
}
__device__ inline float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const float t = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(t);
}

__device__ inline void raise_error(int32_t* flag, int32_t code) {
  if (flag) atomicCAS(flag, 0, code);
}

}  // namespace kvscope::cuda
