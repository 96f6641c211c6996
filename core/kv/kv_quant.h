#pragma once
// Element codecs of the quantized KV cache: int8 and OCP FP8 (E4M3, E5M2), each with one f32
// scale per (token, kv head) vector. Header-only and `KVSCOPE_HD inline` (__host__ __device__
// under nvcc): the CUDA backend runs these very functions (cuda/kv_math.h re-exports them), so the
// two backends cannot drift apart. Only integer bit manipulation and float arithmetic, no std::.
//
// Why one scale per token per head (not per block): a token's K/V is written once, when it is
// computed, and never rewritten. A per-block scale would change whenever a later token of the
// block has a larger magnitude, forcing the whole block to be re-quantized (and blocks shared
// through the prefix cache would change under their readers). Per-token scales cost 4 bytes per
// head vector (3% at head_dim 128) and track outlier tokens, which per-block scales smear.
//
// FP8 follows the OCP 8-bit floating point specification v1.0:
//  * E4M3: bias 7, no infinities, max finite 448 = S.1111.110, NaN = S.1111.111, subnormals
//    m * 2^-9.
//  * E5M2: IEEE-like, bias 15, max finite 57344 = S.11110.11, inf = S.11111.00, NaN =
//    S.11111.{01,10,11} (we emit .11), subnormals m * 2^-16.
//  * Encoding rounds to nearest, ties to even. NaN stays NaN (sign kept).
//  * Overflow (finite values that round past the max finite, and +-inf) follows an explicit
//    Fp8Overflow mode: Saturate gives +-max finite (PTX cvt.satfinite); Ieee gives +-inf (E5M2)
//    or NaN (E4M3, which has no inf). The KV cache's rule, and the one-argument overloads: E4M3
//    SATURATES, E5M2 is IEEE. In the KV cache x / scale never exceeds the max finite value, so
//    the rule only matters at the converters' edges (tested exhaustively in
//    tests/core/kv/test_kv_quant.cpp and, both modes against a reference encoder, in
//    tests/cuda/test_cuda_host_math.cpp).
#include <stdint.h>

#ifndef KVSCOPE_HD
#if defined(__CUDACC__)
#define KVSCOPE_HD __host__ __device__
#else
#define KVSCOPE_HD
#endif
#endif

namespace kvscope::kvq {

constexpr float kInt8Max = 127.0f;
constexpr float kE4M3Max = 448.0f;
constexpr float kE5M2Max = 57344.0f;

enum class Fp8Overflow : int { Saturate, Ieee };

KVSCOPE_HD inline uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KVSCOPE_HD inline float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Magnitude of f32 bits `mag` (sign cleared, finite, not NaN) as an fp8 code without sign, for a
// format with M mantissa bits and exponent bias B, rounded to nearest even. The fp8 codes of
// non-negative finite values are ordered like the values, so a mantissa carry that overflows
// into the exponent field (or from subnormal to normal) is still the right code. The result can
// exceed the largest finite code; the caller applies the format's overflow rule.
template <int M, int B>
KVSCOPE_HD inline uint32_t fp8_round_magnitude(uint32_t mag) {
  if (mag < 0x00800000u) return 0;                          // f32 zero or subnormal: far below half the fp8 minimum
  const int32_t e = static_cast<int32_t>(mag >> 23) - 127;  // unbiased f32 exponent
  if (e > 20) return 0x7FFu;                                // far beyond any fp8 range
  const uint32_t full = (mag & 0x7FFFFFu) | 0x800000u;      // 24-bit significand, implicit 1
  // Units of the result's last place: 2^(e - M) for normals, 2^(1 - B - M) (the smallest
  // subnormal) below the normal range. shift = how many significand bits fall below that unit.
  const int32_t min_normal_e = 1 - B;
  const int32_t shift = (e >= min_normal_e) ? 23 - M : 23 - M + (min_normal_e - e);
  if (shift > 24) return 0;  // below half the smallest subnormal
  const uint32_t q = full >> shift;
  const uint32_t rem = full & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rounded = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
  if (e < min_normal_e) return rounded;  // subnormal code; 1 << M is the smallest normal code
  // Normal: q holds the implicit 1 at bit M; replace it by the biased exponent.
  return (static_cast<uint32_t>(e + B) << M) + (rounded - (1u << M));
}

KVSCOPE_HD inline uint8_t f32_to_fp8_e4m3(float x, Fp8Overflow mode) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t mag = u & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);         // NaN
  const uint32_t overflow = mode == Fp8Overflow::Saturate ? 0x7Eu : 0x7Fu;  // 448, or NaN (no inf)
  if (mag == 0x7F800000u) return static_cast<uint8_t>(sign | overflow);
  uint32_t code = fp8_round_magnitude<3, 7>(mag);
  if (code > 0x7Eu) code = overflow;
  return static_cast<uint8_t>(sign | code);
}

KVSCOPE_HD inline uint8_t f32_to_fp8_e5m2(float x, Fp8Overflow mode) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t mag = u & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);         // NaN
  const uint32_t overflow = mode == Fp8Overflow::Saturate ? 0x7Bu : 0x7Cu;  // 57344, or inf
  if (mag == 0x7F800000u) return static_cast<uint8_t>(sign | overflow);
  uint32_t code = fp8_round_magnitude<2, 15>(mag);
  if (code > 0x7Bu) code = overflow;
  return static_cast<uint8_t>(sign | code);
}

// The KV cache's rule (one-argument overloads rather than default arguments, so either form can
// be taken as a function pointer).
KVSCOPE_HD inline uint8_t f32_to_fp8_e4m3(float x) { return f32_to_fp8_e4m3(x, Fp8Overflow::Saturate); }
KVSCOPE_HD inline uint8_t f32_to_fp8_e5m2(float x) { return f32_to_fp8_e5m2(x, Fp8Overflow::Ieee); }

KVSCOPE_HD inline float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xFu, m = b & 0x7u;
  if (e == 0xFu && m == 0x7u) return float_of(sign | 0x7FC00000u);
  if (e == 0) return float_of(sign | bits_of(static_cast<float>(m) * (1.0f / 512.0f)));  // m * 2^-9, exact
  return float_of(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

KVSCOPE_HD inline float fp8_e5m2_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 2) & 0x1Fu, m = b & 0x3u;
  if (e == 0x1Fu) return float_of(sign | (m == 0 ? 0x7F800000u : 0x7FC00000u));
  if (e == 0) return float_of(sign | bits_of(static_cast<float>(m) * (1.0f / 65536.0f)));  // m * 2^-16
  return float_of(sign | ((e - 15u + 127u) << 23) | (m << 21));
}

// Round to nearest integer, ties to even, for |x| < 2^22 (adding and removing 1.5 * 2^23 leaves
// the integer part in the significand; exact in IEEE f32 arithmetic without fast-math).
KVSCOPE_HD inline float round_half_even(float x) {
  const float magic = 12582912.0f;
  return (x + magic) - magic;
}

KVSCOPE_HD inline int8_t f32_to_int8(float x) {
  if (x != x) return 0;          // NaN
  float r = round_half_even(x);  // wrong beyond 2^22, but such values clamp to +-127 anyway
  r = r > kInt8Max ? kInt8Max : (r < -kInt8Max ? -kInt8Max : r);
  return static_cast<int8_t>(r);
}

// scale = absmax / qmax so the largest element maps to the largest code; 1 for an all-zero
// vector (any scale decodes zeros exactly, and 1 avoids a division by zero).
KVSCOPE_HD inline float kv_scale_of_absmax(float amax, float qmax) { return amax > 0.0f ? amax / qmax : 1.0f; }

KVSCOPE_HD inline float kv_scale(const float* x, int32_t n, float qmax) {
  float amax = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    const float a = float_of(bits_of(x[i]) & 0x7FFFFFFFu);
    amax = a > amax ? a : amax;
  }
  return kv_scale_of_absmax(amax, qmax);
}

// Quantize one head vector; returns its scale.
KVSCOPE_HD inline float quantize_int8(const float* x, int32_t n, int8_t* q) {
  const float s = kv_scale(x, n, kInt8Max);
  for (int32_t i = 0; i < n; ++i) q[i] = f32_to_int8(x[i] / s);
  return s;
}
KVSCOPE_HD inline float quantize_fp8_e4m3(const float* x, int32_t n, uint8_t* q) {
  const float s = kv_scale(x, n, kE4M3Max);
  for (int32_t i = 0; i < n; ++i) q[i] = f32_to_fp8_e4m3(x[i] / s);
  return s;
}
KVSCOPE_HD inline float quantize_fp8_e5m2(const float* x, int32_t n, uint8_t* q) {
  const float s = kv_scale(x, n, kE5M2Max);
  for (int32_t i = 0; i < n; ++i) q[i] = f32_to_fp8_e5m2(x[i] / s);
  return s;
}

KVSCOPE_HD inline void dequantize_int8(const int8_t* q, int32_t n, float s, float* y) {
  for (int32_t i = 0; i < n; ++i) y[i] = static_cast<float>(q[i]) * s;
}
KVSCOPE_HD inline void dequantize_fp8_e4m3(const uint8_t* q, int32_t n, float s, float* y) {
  for (int32_t i = 0; i < n; ++i) y[i] = fp8_e4m3_to_f32(q[i]) * s;
}
KVSCOPE_HD inline void dequantize_fp8_e5m2(const uint8_t* q, int32_t n, float s, float* y) {
  for (int32_t i = 0; i < n; ++i) y[i] = fp8_e5m2_to_f32(q[i]) * s;
}

}  // namespace kvscope::kvq
