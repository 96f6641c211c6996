// SIMD dot kernels. AVX2 (+FMA, F16C) is the baseline; AVX-512 widens the float kernels, and
// AVX-512 VNNI (VL) replaces the maddubs/madd pairs of the integer kernels with vpdpbusd /
// vpdpwssd. The K-quant kernels reduce each super-block to an exact int32 and then scale it with
// the same float expression as the scalar kernel, so they agree with it bit for bit; Q8_0/Q4_0
// (Q5_0, IQ4_NL, MXFP4) and the float kernels keep vector float accumulators (ggml does the same), which differs from
// the scalar result only by float rounding.
#include "cpu/quant_dot_kernels.h"

#include <cmath>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KVSCOPE_QDOT_AVX2 1
#include <immintrin.h>  // already included (with GCC 12 warnings silenced) by quant_dot_kernels.h
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(KVSCOPE_QDOT_AVX2)
#define KVSCOPE_QDOT_VNNI 1
#endif

namespace kvscope::qdot {

#if defined(KVSCOPE_QDOT_AVX2)
namespace {

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline __m256i loadu256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Sums of 4 adjacent products u8 x s8 into 8 int32 lanes.
inline __m256i dot_u8_s8(__m256i u, __m256i s) {
#if defined(KVSCOPE_QDOT_VNNI)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// Signed x signed via |a| and sign(a)*b. b must avoid -128 (our activations are in
// [-127, 127]); a may be -128, whose magnitude 128 is still a valid unsigned byte.
inline __m256i dot_s8_s8(__m256i a, __m256i b) { return dot_u8_s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)); }

// acc += the int16 pair products p * scale, in int32 lanes.
inline __m256i madd_acc(__m256i acc, __m256i p, __m256i scale) {
#if defined(KVSCOPE_QDOT_VNNI)
  return _mm256_dpwssd_epi32(acc, p, scale);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale));
#endif
}

}  // namespace

float dot_f32_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  const float* a = reinterpret_cast<const float*>(w);  // loads below are unaligned
  const float* b = reinterpret_cast<const float*>(x);
  int64_t i = 0;
  float sum = 0;
#if defined(__AVX512F__)
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (; i + 64 <= n; i += 64)
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16 * k), _mm512_loadu_ps(b + i + 16 * k), acc[k]);
  for (; i + 16 <= n; i += 16) acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc[0]);
  sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
#else
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k)
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
  sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#endif
  for (; i < n; ++i) sum += load_f32(w + 4 * i) * load_f32(x + 4 * i);
  return sum;
}

float dot_f16_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  int64_t i = 0;
  float sum = 0;
#if defined(__AVX512F__)
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 2; ++k) {
      const __m512 va = _mm512_cvtph_ps(loadu256(w + 2 * (i + 16 * k)));
      const __m512 vb = _mm512_cvtph_ps(loadu256(x + 2 * (i + 16 * k)));
      acc[k] = _mm512_fmadd_ps(va, vb, acc[k]);
    }
  sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
#endif
  __m256 acc8 = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 va = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
    const __m256 vb = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 2 * i)));
    acc8 = _mm256_fmadd_ps(va, vb, acc8);
  }
  sum += hsum_ps(acc8);
  for (; i < n; ++i) sum += load_half(w + 2 * i) * load_half(x + 2 * i);
  return sum;
}

float dot_bf16_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  // bf16 is the top half of an f32: widen to 32 bits and shift left by 16.
  int64_t i = 0;
  float sum = 0;
#if defined(__AVX512F__)
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 2; ++k) {
      const __m512 va =
          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(w + 2 * (i + 16 * k))), 16));
      const __m512 vb =
          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(x + 2 * (i + 16 * k))), 16));
      acc[k] = _mm512_fmadd_ps(va, vb, acc[k]);
    }
  sum = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
#endif
  __m256 acc8 = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m128i ra = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i));
    const __m128i rb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 2 * i));
    const __m256 va = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ra), 16));
    const __m256 vb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(rb), 16));
    acc8 = _mm256_fmadd_ps(va, vb, acc8);
  }
  sum += hsum_ps(acc8);
  for (; i < n; ++i) {
    uint16_t a, b;
    std::memcpy(&a, w + 2 * i, 2);
    std::memcpy(&b, x + 2 * i, 2);
    sum += bf16_to_fp32(a) * bf16_to_fp32(b);
  }
  return sum;
}

namespace {
// Q8_0 / Q4_0 / Q5_0 against Q8_0 activations share the form sum_blocks (dw*dx) * sum(q*qx)
// over signed levels q; `levels(block)` gives a block's 32 levels as signed bytes, `scale(block)`
// its dw (the f16 first field, MXFP4 excepted). Two blocks per iteration into two accumulators to
// hide the FMA latency.
inline float half_scale(const uint8_t* bw) { return load_half(bw); }
template <typename Levels, typename Scale = decltype(&half_scale)>
float dot_symmetric_q8_0(int64_t nb, size_t block_bytes, const uint8_t* w, const uint8_t* x, Levels levels,
                         Scale scale = &half_scale) {
  constexpr size_t BX = sizeof(BlockQ8_0);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t ib = 0;
  for (; ib + 1 < nb; ib += 2) {
    const uint8_t* w0 = w + ib * block_bytes;
    const uint8_t* x0 = x + ib * BX;
    const __m256i p0 = dot_s8_s8(levels(w0), loadu256(x0 + kQ8_0Qs));
    const __m256i p1 = dot_s8_s8(levels(w0 + block_bytes), loadu256(x0 + BX + kQ8_0Qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(scale(w0) * load_half(x0)), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(scale(w0 + block_bytes) * load_half(x0 + BX)), _mm256_cvtepi32_ps(p1), acc1);
  }
  for (; ib < nb; ++ib) {
    const uint8_t* w0 = w + ib * block_bytes;
    const uint8_t* x0 = x + ib * BX;
    const __m256i p0 = dot_s8_s8(levels(w0), loadu256(x0 + kQ8_0Qs));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(scale(w0) * load_half(x0)), _mm256_cvtepi32_ps(p0), acc0);
  }
  return hsum_ps(_mm256_add_ps(acc0, acc1));
}

// 32 Q4_0 values as signed bytes in [-8, 7]: low nibbles are elements 0-15, high nibbles 16-31.
inline __m256i unpack_q4_0(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}
}  // namespace

float dot_q8_0_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  return dot_symmetric_q8_0(n / QK8_0, sizeof(BlockQ8_0), w, x,
                            [](const uint8_t* bw) { return loadu256(bw + kQ8_0Qs); });
}

float dot_q4_0_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  return dot_symmetric_q8_0(n / QK4_0, sizeof(BlockQ4_0), w, x,
                            [](const uint8_t* bw) { return unpack_q4_0(bw + kQ4_0Qs); });
}

// IQ4_NL: Q4_0's block layout with the nibbles indexing the non-linear table (vpshufb per lane).
float dot_iq4_nl_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  return dot_symmetric_q8_0(n / QK4_NL, sizeof(BlockIQ4_NL), w, x, [](const uint8_t* bw) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bw + kIQ4_NLQs));
    const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), idx);
  });
}

// MXFP4: IQ4_NL's kernel with the E2M1 table and a power-of-two scale byte before the nibbles.
float dot_mxfp4_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  return dot_symmetric_q8_0(
      n / QK_MXFP4, sizeof(BlockMXFP4), w, x,
      [](const uint8_t* bw) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bw + kMXFP4Qs));
        const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
        const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
        return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), idx);
      },
      [](const uint8_t* bw) { return e8m0_to_fp32_half(bw[0]); });
}

namespace {
// 32 unsigned nibbles (0..15): low nibbles are elements 0-15, high nibbles 16-31.
inline __m256i unpack_nibbles_32(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

// Byte j = 0xFF where bit j of the 32-bit word is set, else 0. Each 128-bit lane gets the two
// source bytes it needs (lane 0: bytes 0-1, lane 1: bytes 2-3); OR-ing every bit but the one
// selected makes a byte all-ones exactly when that bit was set.
inline __m256i bits_to_bytes_32(uint32_t bits) {
  const __m256i pick =
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), pick);
  const __m256i others = _mm256_set1_epi64x(0x7FBFDFEFF7FBFDFE);
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

// Q4_1 / Q5_1 share the form sum_blocks (dw*dx) * sum(q*qx) + m * s over unsigned levels q.
template <typename Levels>
float dot_affine_q8_1(int64_t nb, size_t block_bytes, size_t m_off, const uint8_t* w, const uint8_t* x, Levels levels) {
  constexpr size_t BX = sizeof(BlockQ8_1);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t ib = 0; ib < nb; ++ib) {
    const uint8_t* bw = w + ib * block_bytes;
    const uint8_t* bx = x + ib * BX;
    mins += load_half(bw + m_off) * load_half(bx + kQ8_1S);
    const __m256i p = dot_u8_s8(levels(bw), loadu256(bx + kQ8_1Qs));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(load_half(bw) * load_half(bx)), _mm256_cvtepi32_ps(p), acc);
  }
  return hsum_ps(acc) + mins;
}
}  // namespace

float dot_q4_1_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  return dot_affine_q8_1(n / QK4_1, sizeof(BlockQ4_1), kQ4_1M, w, x,
                         [](const uint8_t* bw) { return unpack_nibbles_32(bw + kQ4_1Qs); });
}

float dot_q5_1_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  return dot_affine_q8_1(n / QK5_1, sizeof(BlockQ5_1), kQ5_1M, w, x, [](const uint8_t* bw) {
    const __m256i high = _mm256_and_si256(bits_to_bytes_32(load_u32(bw + kQ5_1Qh)), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(unpack_nibbles_32(bw + kQ5_1Qs), high);
  });
}

float dot_q5_0_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  // (nibble | bit5 << 4) - 16 as a signed byte: nibble when the fifth bit is set, else
  // nibble - 16, which is the nibble with the top four bits of the byte set.
  return dot_symmetric_q8_0(n / QK5_0, sizeof(BlockQ5_0), w, x, [](const uint8_t* bw) {
    const __m256i neg =
        _mm256_andnot_si256(bits_to_bytes_32(load_u32(bw + kQ5_0Qh)), _mm256_set1_epi8(static_cast<char>(0xF0)));
    return _mm256_or_si256(unpack_nibbles_32(bw + kQ5_0Qs), neg);
  });
}

namespace {
// Min term of Q4_K / Q5_K: sum_j m_j * (bsum[2j] + bsum[2j+1]), pairs added by hadd, products by madd.
inline int32_t k4_min_term(const uint8_t* bx, const uint8_t* mins8) {
  const __m128i bs_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bx + kQ8_KBsums));
  const __m128i bs_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bx + kQ8_KBsums + 16));
  const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins8)));
  __m128i pm = _mm_madd_epi16(_mm_hadd_epi16(bs_lo, bs_hi), mins);
  pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, _MM_SHUFFLE(1, 0, 3, 2)));
  pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(pm);
}
}  // namespace

float dot_q5_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  const __m256i mask4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ5_K);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    alignas(16) uint8_t sm[16];  // scales[8], mins[8]
    unpack_q4_k_scales_words(bw + kQ5_KScales, sm);
    const int32_t sum_m = k4_min_term(bx, sm + 8);
    const __m256i qh = loadu256(bw + kQ5_KQh);
    __m256i acc[4];
    for (int c = 0; c < 4; ++c) {
      const __m256i q = loadu256(bw + kQ5_KQs + 32 * c);
      // Fifth bits: bit 2c (low nibbles) and 2c+1 (high nibbles) of each qh byte, moved to bit 4.
      // The epi16 shifts cannot mix bytes once masked to bit 0 of each byte.
      const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4);
      const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, mask4), h_lo);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask4), h_hi);
      // Levels are 0..31 unsigned: maddubs pairs stay below 2 * 31 * 127, no saturation.
      const __m256i p_lo = _mm256_maddubs_epi16(lo, loadu256(bx + kQ8_KQs + 64 * c));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, loadu256(bx + kQ8_KQs + 64 * c + 32));
      acc[c] = madd_acc(_mm256_setzero_si256(), p_lo, _mm256_set1_epi16(sm[2 * c]));
      acc[c] = madd_acc(acc[c], p_hi, _mm256_set1_epi16(sm[2 * c + 1]));
    }
    const int32_t sum_q =
        hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3])));
    const float dx = load_f32(bx);
    const float d = load_half(bw) * dx;
    const float dmin = load_half(bw + kQ5_KDmin) * dx;
    sum += std::fma(d, static_cast<float>(sum_q), -(dmin * static_cast<float>(sum_m)));
  }
  return sum;
}

float dot_q4_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  const __m256i mask4 = _mm256_set1_epi8(0x0F);
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ4_K);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    alignas(16) uint8_t sm[16];  // scales[8], mins[8]
    unpack_q4_k_scales_words(bw + kQ4_KScales, sm);

    const int32_t sum_m = k4_min_term(bx, sm + 8);

    // Nibbles are unsigned (0..15), so maddubs needs no sign trick and cannot saturate. One
    // accumulator per 64-value chunk keeps the multiply-add chains short.
    __m256i acc[4];
    for (int c = 0; c < 4; ++c) {
      const __m256i q4 = loadu256(bw + kQ4_KQs + 32 * c);
      const __m256i lo = _mm256_and_si256(q4, mask4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), mask4);
      const __m256i p_lo = _mm256_maddubs_epi16(lo, loadu256(bx + kQ8_KQs + 64 * c));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, loadu256(bx + kQ8_KQs + 64 * c + 32));
      acc[c] = madd_acc(_mm256_setzero_si256(), p_lo, _mm256_set1_epi16(sm[2 * c]));
      acc[c] = madd_acc(acc[c], p_hi, _mm256_set1_epi16(sm[2 * c + 1]));
    }
    const int32_t sum_q =
        hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3])));
    const float dx = load_f32(bx);
    const float d = load_half(bw) * dx;
    const float dmin = load_half(bw + kQ4_KDmin) * dx;
    sum += std::fma(d, static_cast<float>(sum_q), -(dmin * static_cast<float>(sum_m)));
  }
  return sum;
}

float dot_q6_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ6_K);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    int8_t sc[QK_K / 16];
    std::memcpy(sc, bw + kQ6_KScales, sizeof sc);
    // The -32 offset of every 6-bit value is folded into one correction: 32 * sum(sc * bsum).
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    const int32_t offset_corr = hsum_epi32(_mm256_madd_epi16(sc16, loadu256(bx + kQ8_KBsums)));

    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = loadu256(bw + kQ6_KQl + 64 * half);
      const __m256i ql1 = loadu256(bw + kQ6_KQl + 64 * half + 32);
      const __m256i qh = loadu256(bw + kQ6_KQh + 32 * half);
      // Rebuild the four 32-value rows (values 0..63); the epi16 shifts never carry across bytes
      // because each masked field stays inside its byte.
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0C)), 2));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                             _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(0xC0))), 2));
      const int8_t* s = sc + 8 * half;
      for (int r = 0; r < 4; ++r) {
        const __m256i p = _mm256_maddubs_epi16(q[r], loadu256(bx + kQ8_KQs + 128 * half + 32 * r));
        // int16 lanes 0-7 hold values 0-15 of the row (scale 2r), lanes 8-15 values 16-31 (2r+1).
        const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(s[2 * r + 1]), _mm_set1_epi16(s[2 * r]));
        acc[r] = madd_acc(acc[r], p, scale);
      }
    }
    const __m256i total = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
    const int32_t sumi = hsum_epi32(total) - 32 * offset_corr;
    sum = std::fma(load_half(bw + kQ6_KD) * load_f32(bx), static_cast<float>(sumi), sum);
  }
  return sum;
}

#else  // no AVX2: the scalar kernels are the fast path

float dot_f32_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_f32_scalar(n, w, x); }
float dot_f16_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_f16_scalar(n, w, x); }
float dot_bf16_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_bf16_scalar(n, w, x); }
float dot_q8_0_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q8_0_scalar(n, w, x); }
float dot_q4_0_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q4_0_scalar(n, w, x); }
float dot_q4_1_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q4_1_scalar(n, w, x); }
float dot_q5_0_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q5_0_scalar(n, w, x); }
float dot_q5_1_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q5_1_scalar(n, w, x); }
float dot_q4_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q4_k_scalar(n, w, x); }
float dot_q5_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q5_k_scalar(n, w, x); }
float dot_q6_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q6_k_scalar(n, w, x); }
float dot_iq4_nl_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_iq4_nl_scalar(n, w, x); }
float dot_mxfp4_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_mxfp4_scalar(n, w, x); }

#endif

}  // namespace kvscope::qdot
