#include "cpu/quantize_avx512.h"

#include <cstring>

#include "gguf/ggml_types.h"

#if defined(__x86_64__)
#include "cpu/x86_intrinsics.h"
#define KVSCOPE_AVX512BW __attribute__((target("avx512f,avx512bw")))
#endif

namespace kvscope {

#if defined(__x86_64__)

bool quantize_avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return ok;
}

namespace {

// |x| lanes folded into acc; a NaN lane keeps acc (maxps returns its second operand then),
// as std::fmax(acc, NaN) does.
KVSCOPE_AVX512BW inline __m512 abs_max(__m512 acc, __m512 x) { return _mm512_max_ps(_mm512_abs_ps(x), acc); }

}  // namespace

// quant_dot.cpp quantize_q8_block: amax, id = 127 / amax (0 when amax is 0), q = lrintf(x * id)
// clamped to [-127, 127], d = f16(amax / 127).
KVSCOPE_AVX512BW void quantize_q8_0_avx512(const float* x, uint8_t* dst, int64_t n) {
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t ib = 0; ib < n / QK8_0; ++ib, x += QK8_0) {
    const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(abs_max(abs_max(_mm512_setzero_ps(), a), b));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i qa = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(a, vid)), lo), hi);
    const __m512i qb = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(b, vid)), lo), hi);
    uint8_t* out = dst + ib * sizeof(BlockQ8_0);
    const uint16_t h = fp32_to_fp16(amax / 127.0f);
    std::memcpy(out, &h, 2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2), _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 18), _mm512_cvtepi32_epi8(qb));
  }
}

// quantize_ref.cpp quantize_q8_k: max = the first value of largest |x|, iscale = -127 / max,
// q = min(127, lrintf(iscale * x)) truncated to a byte, bsums of 16, d = 1 / iscale.
KVSCOPE_AVX512BW void quantize_q8_k_avx512(const float* x, uint8_t* dst, int64_t n) {
  const __m512i hi = _mm512_set1_epi32(127);
  for (int64_t ib = 0; ib < n / QK_K; ++ib, x += QK_K) {
    uint8_t* out = dst + ib * sizeof(BlockQ8_K);
    __m512 v[16];
    __m512 acc = _mm512_setzero_ps();
    for (int c = 0; c < 16; ++c) {
      v[c] = _mm512_loadu_ps(x + 16 * c);
      acc = abs_max(acc, v[c]);
    }
    const float amax = _mm512_reduce_max_ps(acc);
    if (amax == 0.0f) {
      std::memset(out, 0, sizeof(BlockQ8_K));
      continue;
    }
    float max = 0;
    const __m512 vamax = _mm512_set1_ps(amax);
    for (int c = 0; c < 16; ++c) {
      const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(v[c]), vamax, _CMP_EQ_OQ);
      if (m) {
        max = x[16 * c + __builtin_ctz(m)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 vs = _mm512_set1_ps(iscale);
    int16_t bsums[QK_K / 16];
    for (int c = 0; c < 16; ++c) {
      const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v[c], vs)), hi);
      const __m128i q8 = _mm512_cvtepi32_epi8(q);  // truncation, as static_cast<int8_t>
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + offsetof(BlockQ8_K, qs) + 16 * c), q8);
      bsums[c] = static_cast<int16_t>(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q8)));
    }
    std::memcpy(out + offsetof(BlockQ8_K, bsums), bsums, sizeof bsums);
    const float d = 1 / iscale;
    std::memcpy(out, &d, 4);
  }
}

#else

bool quantize_avx512_available() { return false; }
void quantize_q8_0_avx512(const float*, uint8_t*, int64_t) {}
void quantize_q8_k_avx512(const float*, uint8_t*, int64_t) {}

#endif

}  // namespace kvscope
