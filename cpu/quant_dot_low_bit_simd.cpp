// AVX2 dot kernels of Q2_K, Q3_K and IQ4_XS (Q8_K activations); with AVX-512 VNNI (VL) the pair
// sums go through vpdpwssd. Each super-block becomes one exact int32 that is scaled with the
// scalar kernel's float expression, so these agree with quant_dot_low_bit.cpp bit for bit.
// IQ4_NL (Q8_0 activations) is a Q8_0-family kernel in quant_dot_simd.cpp.
#include <cmath>

#include "cpu/quant_dot_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KVSCOPE_QDOT_LB_AVX2 1
#include <immintrin.h>
#endif

namespace kvscope::qdot {

#if defined(KVSCOPE_QDOT_LB_AVX2)
namespace {

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline __m256i loadu256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// acc += the int16 pair products p * scale, in int32 lanes.
inline __m256i madd_acc(__m256i acc, __m256i p, __m256i scale) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, p, scale);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale));
#endif
}

// The 16 IQ4 levels looked up from 32 nibble indices (vpshufb works per 128-bit lane).
inline __m256i iq4_lookup(__m256i idx) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), idx);
}

// 16 packed bytes -> 32 levels: low nibbles are elements 0-15, high nibbles 16-31.
inline __m256i iq4_levels_32(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
  return iq4_lookup(idx);
}

// Pair sums x * level in int16 lanes. The activation's magnitude goes in the unsigned slot
// (Q8_K may hold -128, whose magnitude 128 still fits) and the level carries the sign; levels
// are >= -127, so negating them never wraps, and no pair exceeds 2 * 128 * 127.
inline __m256i pairs_s8(__m256i x, __m256i level) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(level, x));
}

}  // namespace

namespace {
// The 16 Q3_K scales (bias removed) as int16 lanes, unpacked on 32-bit words: scale j takes its
// low 4 bits from nibble j / 8 of byte j % 8 and its top 2 bits from bits 2 (j / 4) of byte
// 8 + j % 4 (the layout q3_k_scales in ggml_types.h reads one scale at a time).
inline __m256i q3_k_scales16(const uint8_t* p) {
  uint32_t w[3];
  std::memcpy(w, p, 12);
  const uint32_t lo = 0x0F0F0F0Fu, hi = 0x03030303u;
  const __m128i words = _mm_setr_epi32(static_cast<int>((w[0] & lo) | ((w[2] & hi) << 4)),
                                       static_cast<int>((w[1] & lo) | (((w[2] >> 2) & hi) << 4)),
                                       static_cast<int>(((w[0] >> 4) & lo) | (((w[2] >> 4) & hi) << 4)),
                                       static_cast<int>(((w[1] >> 4) & lo) | (((w[2] >> 6) & hi) << 4)));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(words, _mm_set1_epi8(32)));
}

// shuffle_epi8 controls that spread int16 lane 2j of a 128-bit lane over the low lane and
// int16 lane 2j + 1 over the high lane (groups 2j and 2j + 1 of one 32-value row).
inline __m256i scale_pick(int j) {
  const int lo = 4 * j, hi = 4 * j + 2;
  return _mm256_setr_epi8(lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo,
                          lo + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1,
                          hi, hi + 1);
}
}  // namespace

float dot_q3_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  const __m256i pick[4] = {scale_pick(0), scale_pick(1), scale_pick(2), scale_pick(3)};
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ3_K);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    const __m256i sc = q3_k_scales16(bw + kQ3_KScales);
    // Levels are taken as level + 4 (0..7, unsigned for maddubs); 4 * sum(sc * bsums) undoes it.
    const int32_t offset_corr = hsum_epi32(_mm256_madd_epi16(sc, loadu256(bx + kQ8_KBsums)));
    const __m256i hm = loadu256(bw + kQ3_KHmask);
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int h = 0; h < 2; ++h) {
      const __m256i q = loadu256(bw + kQ3_KQs + 32 * h);
      // Scales 8h..8h+7 in both 128-bit lanes.
      const __m256i sc_h = h ? _mm256_permute2x128_si256(sc, sc, 0x11) : _mm256_permute2x128_si256(sc, sc, 0x00);
      for (int j = 0; j < 4; ++j) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one), 2);
        const __m256i p = _mm256_maddubs_epi16(_mm256_or_si256(lo, hi), loadu256(bx + kQ8_KQs + 128 * h + 32 * j));
        acc[h] = madd_acc(acc[h], p, _mm256_shuffle_epi8(sc_h, pick[j]));
      }
    }
    const int32_t sumi = hsum_epi32(_mm256_add_epi32(acc[0], acc[1])) - 4 * offset_corr;
    sum = std::fma(load_half(bw + kQ3_KD) * load_f32(bx), static_cast<float>(sumi), sum);
  }
  return sum;
}

float dot_q2_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m256i pick[4] = {scale_pick(0), scale_pick(1), scale_pick(2), scale_pick(3)};
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ2_K);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    // Scale byte g: low nibble the scale of group g, high nibble its min.
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bw + kQ2_KScales));
    const __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(raw, m4));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
    const int32_t sum_m = hsum_epi32(_mm256_madd_epi16(mins, loadu256(bx + kQ8_KBsums)));
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int h = 0; h < 2; ++h) {
      const __m256i q = loadu256(bw + kQ2_KQs + 32 * h);
      const __m256i sc_h = h ? _mm256_permute2x128_si256(sc, sc, 0x11) : _mm256_permute2x128_si256(sc, sc, 0x00);
      for (int j = 0; j < 4; ++j) {
        // Levels 0..3 of groups 8h + 2j (bytes 0-15) and 8h + 2j + 1 (bytes 16-31).
        const __m256i lv = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        const __m256i p = _mm256_maddubs_epi16(lv, loadu256(bx + kQ8_KQs + 128 * h + 32 * j));
        acc[h] = madd_acc(acc[h], p, _mm256_shuffle_epi8(sc_h, pick[j]));
      }
    }
    const int32_t sum_q = hsum_epi32(_mm256_add_epi32(acc[0], acc[1]));
    const float dx = load_f32(bx);
    const float d = load_half(bw + kQ2_KD) * dx;
    const float dmin = load_half(bw + kQ2_KDmin) * dx;
    sum += std::fma(d, static_cast<float>(sum_q), -(dmin * static_cast<float>(sum_m)));
  }
  return sum;
}

float dot_iq4_xs_fast(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockIQ4_XS);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    uint16_t scales_h;
    std::memcpy(&scales_h, bw + kIQ4_XSScalesH, 2);
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int g = 0; g < 8; ++g) {
      const __m256i p = pairs_s8(loadu256(bx + kQ8_KQs + 32 * g), iq4_levels_32(bw + kIQ4_XSQs + 16 * g));
      const int ls = iq4_xs_scale(g, bw + kIQ4_XSScalesL, scales_h);
      acc[g & 1] = madd_acc(acc[g & 1], p, _mm256_set1_epi16(static_cast<int16_t>(ls)));
    }
    const int32_t sumi = hsum_epi32(_mm256_add_epi32(acc[0], acc[1]));
    sum = std::fma(load_half(bw) * load_f32(bx), static_cast<float>(sumi), sum);
  }
  return sum;
}

#else  // no AVX2: the scalar kernels are the fast path

float dot_q2_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q2_k_scalar(n, w, x); }
float dot_q3_k_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_q3_k_scalar(n, w, x); }
float dot_iq4_xs_fast(int64_t n, const uint8_t* w, const uint8_t* x) { return dot_iq4_xs_scalar(n, w, x); }

#endif

}  // namespace kvscope::qdot
