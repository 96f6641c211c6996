#include "cpu/kv_quant4_simd.h"

#include <cstring>

#include "gguf/ggml_types.h"

#if defined(__x86_64__)
#include "cpu/cpu_features.h"
#include "cpu/x86_intrinsics.h"
#define KVSCOPE_AVX2_FMA_F16C __attribute__((target("avx2,fma,f16c")))
#endif

namespace kvscope::kvq4::simd {

#if defined(__x86_64__)

namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// Codes i..i+7 of a packed row (element i at bit i*bits, bits 4 or 2) as 8 int32 lanes: the
// 8*bits bits are one 32- or 16-bit word, broadcast and shifted right by lane * bits.
// (A template: a fixed-size load and constant shifts; a run-time width cost a memcpy call.)
template <int Bits>
KVSCOPE_AVX2_FMA_F16C inline __m256i codes8(const uint8_t* codes, int32_t i) {
  static_assert(Bits == 4 || Bits == 2);
  int32_t word;
  if constexpr (Bits == 4) {
    std::memcpy(&word, codes + i / 2, 4);
  } else {
    uint16_t w16;
    std::memcpy(&w16, codes + i / 4, 2);
    word = w16;
  }
  const __m256i shifts =
      Bits == 4 ? _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28) : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word), shifts), _mm256_set1_epi32((1 << Bits) - 1));
}

template <int Bits>
KVSCOPE_AVX2_FMA_F16C void asym_row(const uint8_t* row, int32_t d, int32_t g, float* y) {
  const uint8_t* params = row + d * Bits / 8;
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    const __m256 s = _mm256_set1_ps(f16_at(params + 4 * (g0 / g)));
    const __m256 mn = _mm256_set1_ps(f16_at(params + 4 * (g0 / g) + 2));
    for (int32_t i = g0; i < g0 + g; i += 8)
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_cvtepi32_ps(codes8<Bits>(row, i)), s, mn));
  }
}

template <int Bits>
KVSCOPE_AVX2_FMA_F16C void channel_rows(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n,
                                        int32_t d, float* y) {
  alignas(32) float s[512], mn[512];    // head_dim <= 512 (checked by the storage)
  for (int32_t c = 0; c < d; c += 8) {  // (scale, min) f16 pairs: 8 of each per step
    const __m256 pairs = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(params + 4 * c)));
    const __m256 pairs2 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(params + 4 * c + 16)));
    // pairs = s0 m0 s1 m1 | s2 m2 s3 m3 (lanes), pairs2 the same for channels 4-7. Halves
    // regrouped: lo = s0 m0 s1 m1 | s4 m4 s5 m5, hi = s2 m2 s3 m3 | s6 m6 s7 m7; then the even
    // (odd) lanes of each half, lo's before hi's, are s0..s7 (m0..m7) in order.
    const __m256 lo = _mm256_permute2f128_ps(pairs, pairs2, 0x20), hi = _mm256_permute2f128_ps(pairs, pairs2, 0x31);
    _mm256_store_ps(s + c, _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm256_store_ps(mn + c, _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int32_t r = 0; r < n; ++r) {
    const uint8_t* row = codes + r * code_stride;
    float* out = y + static_cast<int64_t>(r) * d;
    for (int32_t c = 0; c < d; c += 8)
      _mm256_storeu_ps(out + c, _mm256_fmadd_ps(_mm256_cvtepi32_ps(codes8<Bits>(row, c)), _mm256_load_ps(s + c),
                                                _mm256_load_ps(mn + c)));
  }
}

}  // namespace

bool available() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return ok;
}

KVSCOPE_AVX2_FMA_F16C void decode_int4_row(const uint8_t* row, int32_t d, int32_t g, float* y) {
  const uint8_t* scales = row + d / 2;
  const __m256i eight = _mm256_set1_epi32(8);
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    const __m256 s = _mm256_set1_ps(f16_at(scales + 2 * (g0 / g)));
    for (int32_t i = g0; i < g0 + g; i += 8) {
      const __m256 c = _mm256_cvtepi32_ps(_mm256_sub_epi32(codes8<4>(row, i), eight));
      _mm256_storeu_ps(y + i, _mm256_mul_ps(c, s));
    }
  }
}

void decode_asym_row(const uint8_t* row, int32_t d, int32_t g, int32_t bits, float* y) {
  bits == 4 ? asym_row<4>(row, d, g, y) : asym_row<2>(row, d, g, y);
}

void decode_channel_rows(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n, int32_t d,
                         int32_t bits, float* y) {
  bits == 4 ? channel_rows<4>(codes, code_stride, params, n, d, y)
            : channel_rows<2>(codes, code_stride, params, n, d, y);
}

KVSCOPE_AVX2_FMA_F16C void decode_f16_rows(const uint16_t* h, int32_t n, int32_t d, float* y) {
  const int64_t total = static_cast<int64_t>(n) * d;
  int64_t i = 0;
  for (; i + 8 <= total; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < total; ++i) y[i] = fp16_to_fp32(h[i]);
}

#else

bool available() { return false; }
void decode_int4_row(const uint8_t*, int32_t, int32_t, float*) {}
void decode_asym_row(const uint8_t*, int32_t, int32_t, int32_t, float*) {}
void decode_channel_rows(const uint8_t*, int64_t, const uint8_t*, int32_t, int32_t, int32_t, float*) {}
void decode_f16_rows(const uint16_t*, int32_t, int32_t, float*) {}

#endif

}  // namespace kvscope::kvq4::simd
