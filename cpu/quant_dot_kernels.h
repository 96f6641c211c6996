#pragma once
// Internal to quant_dot*.cpp: per-type dot kernels over raw bytes. Weight rows come straight
// from the mmapped file at any alignment, so kernels read blocks by byte offset (memcpy for
// scalars, unaligned loads for vectors) and never cast to the block structs.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gguf/ggml_types.h"

#if defined(__F16C__)
#include "cpu/x86_intrinsics.h"
#endif

namespace kvscope::qdot {

// Byte offsets inside the blocks (see the structs in ggml_types.h).
constexpr size_t kQ8_0Qs = offsetof(BlockQ8_0, qs);
constexpr size_t kQ4_0Qs = offsetof(BlockQ4_0, qs);
constexpr size_t kQ4_1M = offsetof(BlockQ4_1, m);
constexpr size_t kQ4_1Qs = offsetof(BlockQ4_1, qs);
constexpr size_t kQ5_0Qh = offsetof(BlockQ5_0, qh);
constexpr size_t kQ5_0Qs = offsetof(BlockQ5_0, qs);
constexpr size_t kQ5_1M = offsetof(BlockQ5_1, m);
constexpr size_t kQ5_1Qh = offsetof(BlockQ5_1, qh);
constexpr size_t kQ5_1Qs = offsetof(BlockQ5_1, qs);
constexpr size_t kQ8_1S = offsetof(BlockQ8_1, s);
constexpr size_t kQ8_1Qs = offsetof(BlockQ8_1, qs);
constexpr size_t kQ5_KDmin = offsetof(BlockQ5_K, dmin);
constexpr size_t kQ5_KScales = offsetof(BlockQ5_K, scales);
constexpr size_t kQ5_KQh = offsetof(BlockQ5_K, qh);
constexpr size_t kQ5_KQs = offsetof(BlockQ5_K, qs);
constexpr size_t kQ4_KDmin = offsetof(BlockQ4_K, dmin);
constexpr size_t kQ4_KScales = offsetof(BlockQ4_K, scales);
constexpr size_t kQ4_KQs = offsetof(BlockQ4_K, qs);
constexpr size_t kQ6_KQl = offsetof(BlockQ6_K, ql);
constexpr size_t kQ6_KQh = offsetof(BlockQ6_K, qh);
constexpr size_t kQ6_KScales = offsetof(BlockQ6_K, scales);
constexpr size_t kQ6_KD = offsetof(BlockQ6_K, d);
constexpr size_t kQ2_KScales = offsetof(BlockQ2_K, scales);
constexpr size_t kQ2_KQs = offsetof(BlockQ2_K, qs);
constexpr size_t kQ2_KD = offsetof(BlockQ2_K, d);
constexpr size_t kQ2_KDmin = offsetof(BlockQ2_K, dmin);
constexpr size_t kQ3_KHmask = offsetof(BlockQ3_K, hmask);
constexpr size_t kQ3_KQs = offsetof(BlockQ3_K, qs);
constexpr size_t kQ3_KScales = offsetof(BlockQ3_K, scales);
constexpr size_t kQ3_KD = offsetof(BlockQ3_K, d);
constexpr size_t kIQ4_NLQs = offsetof(BlockIQ4_NL, qs);
constexpr size_t kMXFP4Qs = offsetof(BlockMXFP4, qs);
constexpr size_t kIQ4_XSScalesH = offsetof(BlockIQ4_XS, scales_h);
constexpr size_t kIQ4_XSScalesL = offsetof(BlockIQ4_XS, scales_l);
constexpr size_t kIQ4_XSQs = offsetof(BlockIQ4_XS, qs);
constexpr size_t kQ8_KQs = offsetof(BlockQ8_K, qs);
constexpr size_t kQ8_KBsums = offsetof(BlockQ8_K, bsums);

// Block scales are read once per block; with F16C that is one instruction instead of a call.
inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return fp16_to_fp32(h);
#endif
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// The 8 six-bit (scale, min) pairs of a Q4_K block, unpacked from its 12 scale bytes.
inline void unpack_q4_k_scales(const uint8_t* q, uint8_t sc[8], uint8_t m[8]) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = q[j] & 63;
      m[j] = q[j + 4] & 63;
    } else {
      sc[j] = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
      m[j] = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
  }
}

// The same unpacking on whole 32-bit words: out[0..7] = scales, out[8..15] = mins. Scales 0-3
// and mins 0-3 are the low 6 bits of bytes 0-3 / 4-7; scales and mins 4-7 take their low 4
// bits from the nibbles of bytes 8-11 and their top 2 bits from the spare bits 6-7 of bytes 0-7.
inline void unpack_q4_k_scales_words(const uint8_t* q, uint8_t out[16]) {
  uint32_t w[3];
  std::memcpy(w, q, 12);
  const uint32_t r[4] = {
      w[0] & 0x3F3F3F3Fu,
      (w[2] & 0x0F0F0F0Fu) | (((w[0] >> 6) & 0x03030303u) << 4),
      w[1] & 0x3F3F3F3Fu,
      ((w[2] >> 4) & 0x0F0F0F0Fu) | (((w[1] >> 6) & 0x03030303u) << 4),
  };
  std::memcpy(out, r, 16);
}

// The 256 two-bit levels (0..3) of the Q2_K block at bw, in element order: group g of 16 takes
// bits 2 * ((g % 8) / 2) of bytes 32 * (g / 8) + 16 * (g % 2) + l.
inline void q2_k_levels(const uint8_t* bw, uint8_t out[QK_K]) {
  for (int g = 0; g < 16; ++g) {
    const uint8_t* q = bw + kQ2_KQs + 32 * (g / 8) + 16 * (g % 2);
    const int shift = 2 * ((g % 8) / 2);
    for (int l = 0; l < 16; ++l) out[16 * g + l] = static_cast<uint8_t>((q[l] >> shift) & 3);
  }
}

// The 256 signed levels (-4..3) of the Q3_K block at bw: Q2_K's two bits, minus 4 where the
// group's hmask bit (bit g / 2 of hmask[16 * (g % 2) + l]) is clear.
inline void q3_k_levels(const uint8_t* bw, int8_t out[QK_K]) {
  for (int g = 0; g < 16; ++g) {
    const uint8_t* q = bw + kQ3_KQs + 32 * (g / 8) + 16 * (g % 2);
    const uint8_t* hm = bw + kQ3_KHmask + 16 * (g % 2);
    const int shift = 2 * ((g % 8) / 2);
    for (int l = 0; l < 16; ++l)
      out[16 * g + l] = static_cast<int8_t>(((q[l] >> shift) & 3) - ((hm[l] >> (g / 2)) & 1 ? 0 : 4));
  }
}

// The K-quant kernels end each super-block with explicit std::fma calls (never contracted or
// split by the compiler), so the scalar and SIMD kernels produce the same bits.

// Reference kernels (quant_dot_scalar.cpp). n is a whole number of blocks.
float dot_f32_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_f16_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_bf16_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q8_0_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q4_0_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q4_1_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q5_0_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q5_1_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q4_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q5_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q6_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q2_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q3_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_iq4_nl_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_mxfp4_scalar(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_iq4_xs_scalar(int64_t n, const uint8_t* w, const uint8_t* x);

// Fast kernels (quant_dot_simd.cpp); they fall back to the scalar ones without AVX2.
float dot_f32_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_f16_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_bf16_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q8_0_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q4_0_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q4_1_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q5_0_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q5_1_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q4_k_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q5_k_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q6_k_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_iq4_nl_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_mxfp4_fast(int64_t n, const uint8_t* w, const uint8_t* x);
// quant_dot_low_bit_simd.cpp
float dot_q2_k_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_q3_k_fast(int64_t n, const uint8_t* w, const uint8_t* x);
float dot_iq4_xs_fast(int64_t n, const uint8_t* w, const uint8_t* x);

}  // namespace kvscope::qdot
