#include "cpu/ffn_activation.h"

#include "cpu/ops.h"

#if defined(__x86_64__)
#include "cpu/x86_intrinsics.h"
#define KVSCOPE_AVX512F __attribute__((target("avx512f")))
#endif

namespace kvscope {

namespace {

void scalar(FfnActivation act, float* gate, const float* up, int64_t n) {
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
#endif

}  // namespace

bool ffn_activation_vectorised() {
#if defined(__x86_64__)
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  return has_avx512;
#else
  return false;
#endif
}

void ffn_activation_mul(FfnActivation act, float* gate, const float* up, int64_t n) {
#if defined(__x86_64__)
  if (ffn_activation_vectorised()) return avx512(act, gate, up, n);
#endif
  scalar(act, gate, up, n);
}

}  // namespace kvscope
