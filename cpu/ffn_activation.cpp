#include "cpu/ffn_activation.h"

#include <algorithm>
#include <cmath>

#include "cpu/ops.h"

#if defined(__x86_64__)
#include "cpu/x86_intrinsics.h"
#define KVSCOPE_AVX512F __attribute__((target("avx512f")))
#define KVSCOPE_AVX2_FMA __attribute__((target("avx2,fma")))
#endif

namespace kvscope {

namespace {

// gpt-oss's SwiGLU (ggml_swiglu_oai): the gate clamped above at 7, the up clamped to [-7, 7] and
// shifted by 1, sigmoid sharpened by alpha 1.702. Written as ggml's CPU op writes it.
void swiglu_oai(float* gate, const float* up, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::min(gate[i], kLimit);
    const float y = std::clamp(up[i], -kLimit, kLimit);
    gate[i] = x / (1.0f + std::exp(kAlpha * (-x))) * (y + 1.0f);
  }
}

void scalar(FfnActivation act, float* gate, const float* up, int64_t n) {
  if (act == FfnActivation::SwigluOai) return swiglu_oai(gate, up, n);
  if (act == FfnActivation::Silu)
    for (int64_t i = 0; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
  else
    for (int64_t i = 0; i < n; ++i) gate[i] = gelu_tanh(gate[i]) * up[i];
}

#if defined(__x86_64__)
// exp(z); below -87 it is exp(-87) (callers add it to 1), above 88 +inf.
KVSCOPE_AVX512F inline __m512 exp_ps(__m512 z_in) {
  const __mmask16 overflow = _mm512_cmp_ps_mask(z_in, _mm512_set1_ps(88.0f), _CMP_GT_OQ);
  const __m512 z = _mm512_min_ps(_mm512_max_ps(z_in, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(z, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), z);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_mask_mov_ps(_mm512_scalef_ps(p, k), overflow, _mm512_set1_ps(__builtin_inff()));
}

KVSCOPE_AVX512F void avx512(FfnActivation act, float* gate, const float* up, int64_t n) {
  const bool silu_act = act == FfnActivation::Silu;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    // The tail goes through the same math under a mask, so every element gets one formula.
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, gate + i);
    __m512 z;  // act(x) = x / (1 + exp(z))
    if (silu_act) {
      z = _mm512_sub_ps(_mm512_setzero_ps(), x);
    } else {
      const __m512 x2 = _mm512_mul_ps(x, x);
      const __m512 u = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.79788456080286535587989211986876f), x),
                                     _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x2, one));
      z = _mm512_mul_ps(_mm512_set1_ps(-2.0f), u);
    }
    const __m512 a = _mm512_div_ps(x, _mm512_add_ps(one, exp_ps(z)));
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m, up + i)));
  }
}
// The same exp and formula in 8 lanes for AVX2 CPUs (AMD Zen 1-3, Intel before Ice Lake): no
// roundscale/scalef there, so 2^k is built in the exponent bits (k stays in [-126, 127] after
// the clamp, a normal float). Same polynomial, so the two paths agree to the last rounding.
KVSCOPE_AVX2_FMA inline __m256 exp_ps_avx2(__m256 z_in) {
  const __m256 overflow = _mm256_cmp_ps(z_in, _mm256_set1_ps(88.0f), _CMP_GT_OQ);
  const __m256 z = _mm256_min_ps(_mm256_max_ps(z_in, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(z, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), z);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i pow2k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(pow2k));
  return _mm256_blendv_ps(e, _mm256_set1_ps(__builtin_inff()), overflow);
}

KVSCOPE_AVX2_FMA inline __m256 activation_avx2(bool silu_act, __m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 z;  // act(x) = x / (1 + exp(z))
  if (silu_act) {
    z = _mm256_sub_ps(_mm256_setzero_ps(), x);
  } else {
    const __m256 x2 = _mm256_mul_ps(x, x);
    const __m256 u = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.79788456080286535587989211986876f), x),
                                   _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x2, one));
    z = _mm256_mul_ps(_mm256_set1_ps(-2.0f), u);
  }
  return _mm256_div_ps(x, _mm256_add_ps(one, exp_ps_avx2(z)));
}

KVSCOPE_AVX2_FMA void avx2(FfnActivation act, float* gate, const float* up, int64_t n) {
  const bool silu_act = act == FfnActivation::Silu;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i,
                     _mm256_mul_ps(activation_avx2(silu_act, _mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  if (i == n) return;
  // The tail goes through the same lanes via a padded copy, so every element gets one formula.
  alignas(32) float g[8] = {}, u[8] = {};
  for (int64_t j = i; j < n; ++j) g[j - i] = gate[j], u[j - i] = up[j];
  _mm256_store_ps(g, _mm256_mul_ps(activation_avx2(silu_act, _mm256_load_ps(g)), _mm256_load_ps(u)));
  for (int64_t j = i; j < n; ++j) gate[j] = g[j - i];
}
#endif

}  // namespace

bool ffn_activation_vectorised() {
#if defined(__x86_64__)
  static const bool has_simd =
      __builtin_cpu_supports("avx512f") || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  return has_simd;
#else
  return false;
#endif
}

void ffn_activation_mul(FfnActivation act, float* gate, const float* up, int64_t n) {
  if (act == FfnActivation::SwigluOai) return swiglu_oai(gate, up, n);
#if defined(__x86_64__)
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  if (has_avx512) return avx512(act, gate, up, n);
  if (ffn_activation_vectorised()) return avx2(act, gate, up, n);
#endif
  scalar(act, gate, up, n);
}

}  // namespace kvscope
