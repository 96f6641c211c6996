// Vec-dot type mapping, activation rounding and kernel dispatch. The activation rounding
// reproduces ggml's CPU backend on x86 (the "zen4" build the golden records come from):
//   F16  -> vcvtps2ph, round-half-even            BF16 -> vcvtneps2bf16 (subnormals flushed)
//   Q8_0 -> AVX quantize_row_q8_0: d = amax/127 stored as f16, x * (127/amax) rounded half-even
//   Q8_1 -> as Q8_0, plus s = f16(d * sum(qs)) with the unrounded f32 d (AVX quantize_row_q8_1)
//   Q8_K -> quantize_row_q8_K_ref (f32 scale, bsums of 16)
#include "cpu/quant_dot.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "cpu/quant_dot_kernels.h"
#include "cpu/quantize_avx512.h"

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#endif

namespace kvscope {

namespace {

[[noreturn]] void unsupported(const char* fn, GgmlType t) {
  throw std::invalid_argument(std::string(fn) + ": weights of type " + ggml_type_name(static_cast<uint32_t>(t)) +
                              " are not supported");
}

void round_f16(const float* x, uint8_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), h);
  }
#endif
  for (; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

// vcvtneps2bf16 as ggml uses it on AVX512-BF16 CPUs: whole groups of 32 go through the
// instruction (which treats subnormal inputs as zero), the tail through the scalar converter.
uint16_t bf16_hw(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7F800000u) == 0 && (u & 0x007FFFFFu) != 0) return static_cast<uint16_t>((u >> 16) & 0x8000);
  return fp32_to_bf16(f);
}

void round_bf16(const float* x, uint8_t* dst, int64_t n) {
  const int64_t n_hw = n / 32 * 32;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = i < n_hw ? bf16_hw(x[i]) : fp32_to_bf16(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

// Rounds one block of 32 like ggml's AVX quantize_row_q8_0/q8_1; returns the f32 scale d.
float quantize_q8_block(const float* x, int8_t* qs) {
  float amax = 0.0f;
  for (int j = 0; j < QK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  // 127/amax, not 1/d: the AVX path multiplies by this and the result differs in the last bit.
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  // lrintf rounds half to even like _mm256_round_ps(_MM_ROUND_NEAREST); the clamp only
  // matters for NaN/inf input, where it keeps the conversion defined.
  for (int j = 0; j < QK8_0; ++j) {
    const long v = std::lrintf(x[j] * id);
    qs[j] = static_cast<int8_t>(v < -127 ? -127 : v > 127 ? 127 : v);
  }
  return amax / 127.0f;
}

void quantize_q8_1_activations(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t ib = 0; ib < n / QK8_1; ++ib, x += QK8_1) {
    BlockQ8_1 b;
    const float d = quantize_q8_block(x, b.qs);
    int32_t sum = 0;
    for (int j = 0; j < QK8_1; ++j) sum += b.qs[j];
    b.d = fp32_to_fp16(d);
    b.s = fp32_to_fp16(d * static_cast<float>(sum));
    std::memcpy(dst + ib * sizeof(BlockQ8_1), &b, sizeof b);
  }
}

void quantize_q8_0_activations(const float* x, uint8_t* dst, int64_t n) {
  for (int64_t ib = 0; ib < n / QK8_0; ++ib, x += QK8_0) {
    BlockQ8_0 b;
    b.d = fp32_to_fp16(quantize_q8_block(x, b.qs));
    std::memcpy(dst + ib * sizeof(BlockQ8_0), &b, sizeof b);
  }
}

}  // namespace

GgmlType vec_dot_type(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::F32:
      return GgmlType::F32;
    case GgmlType::F16:
      return GgmlType::F16;
    case GgmlType::BF16:
      return GgmlType::BF16;
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
      return GgmlType::Q8_K;
    default:
      unsupported("vec_dot_type", weight_type);
  }
}

size_t vec_dot_row_bytes(GgmlType weight_type, int64_t n) { return ggml_row_bytes(vec_dot_type(weight_type), n); }

void convert_activations_scalar(GgmlType weight_type, const float* x, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  switch (vec_dot_type(weight_type)) {
    case GgmlType::F32:
      std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      round_f16(x, out, n);
      return;
    case GgmlType::BF16:
      round_bf16(x, out, n);
      return;
    case GgmlType::Q8_0:
      quantize_q8_0_activations(x, out, n);
      return;
    case GgmlType::Q8_1:
      quantize_q8_1_activations(x, out, n);
      return;
    case GgmlType::Q8_K:
      quantize_row(GgmlType::Q8_K, x, out, n);
      return;
    default:
      unsupported("convert_activations", weight_type);
  }
}

void convert_activations(GgmlType weight_type, const float* x, void* dst, int64_t n) {
  // Q8_0 / Q8_K rounding is most of the per-token work outside the matmuls in a prefill.
  const GgmlType vt = vec_dot_type(weight_type);
  if ((vt == GgmlType::Q8_0 || vt == GgmlType::Q8_K) && quantize_avx512_available()) {
    if (vt == GgmlType::Q8_0)
      quantize_q8_0_avx512(x, static_cast<uint8_t*>(dst), n);
    else
      quantize_q8_k_avx512(x, static_cast<uint8_t*>(dst), n);
    return;
  }
  convert_activations_scalar(weight_type, x, dst, n);
}

float vec_dot(GgmlType weight_type, int64_t n, const void* w_row, const void* x_converted) {
  const auto* w = static_cast<const uint8_t*>(w_row);
  const auto* x = static_cast<const uint8_t*>(x_converted);
  switch (weight_type) {
    case GgmlType::F32:
      return qdot::dot_f32_fast(n, w, x);
    case GgmlType::F16:
      return qdot::dot_f16_fast(n, w, x);
    case GgmlType::BF16:
      return qdot::dot_bf16_fast(n, w, x);
    case GgmlType::Q8_0:
      return qdot::dot_q8_0_fast(n, w, x);
    case GgmlType::Q4_0:
      return qdot::dot_q4_0_fast(n, w, x);
    case GgmlType::Q4_1:
      return qdot::dot_q4_1_fast(n, w, x);
    case GgmlType::Q5_0:
      return qdot::dot_q5_0_fast(n, w, x);
    case GgmlType::Q5_1:
      return qdot::dot_q5_1_fast(n, w, x);
    case GgmlType::Q4_K:
      return qdot::dot_q4_k_fast(n, w, x);
    case GgmlType::Q5_K:
      return qdot::dot_q5_k_fast(n, w, x);
    case GgmlType::Q6_K:
      return qdot::dot_q6_k_fast(n, w, x);
    case GgmlType::Q2_K:
      return qdot::dot_q2_k_fast(n, w, x);
    case GgmlType::Q3_K:
      return qdot::dot_q3_k_fast(n, w, x);
    case GgmlType::IQ4_NL:
      return qdot::dot_iq4_nl_fast(n, w, x);
    case GgmlType::MXFP4:
      return qdot::dot_mxfp4_fast(n, w, x);
    case GgmlType::IQ4_XS:
      return qdot::dot_iq4_xs_fast(n, w, x);
    default:
      unsupported("vec_dot", weight_type);
  }
}

float vec_dot_scalar(GgmlType weight_type, int64_t n, const void* w_row, const void* x_converted) {
  const auto* w = static_cast<const uint8_t*>(w_row);
  const auto* x = static_cast<const uint8_t*>(x_converted);
  switch (weight_type) {
    case GgmlType::F32:
      return qdot::dot_f32_scalar(n, w, x);
    case GgmlType::F16:
      return qdot::dot_f16_scalar(n, w, x);
    case GgmlType::BF16:
      return qdot::dot_bf16_scalar(n, w, x);
    case GgmlType::Q8_0:
      return qdot::dot_q8_0_scalar(n, w, x);
    case GgmlType::Q4_0:
      return qdot::dot_q4_0_scalar(n, w, x);
    case GgmlType::Q4_1:
      return qdot::dot_q4_1_scalar(n, w, x);
    case GgmlType::Q5_0:
      return qdot::dot_q5_0_scalar(n, w, x);
    case GgmlType::Q5_1:
      return qdot::dot_q5_1_scalar(n, w, x);
    case GgmlType::Q4_K:
      return qdot::dot_q4_k_scalar(n, w, x);
    case GgmlType::Q5_K:
      return qdot::dot_q5_k_scalar(n, w, x);
    case GgmlType::Q6_K:
      return qdot::dot_q6_k_scalar(n, w, x);
    case GgmlType::Q2_K:
      return qdot::dot_q2_k_scalar(n, w, x);
    case GgmlType::Q3_K:
      return qdot::dot_q3_k_scalar(n, w, x);
    case GgmlType::IQ4_NL:
      return qdot::dot_iq4_nl_scalar(n, w, x);
    case GgmlType::MXFP4:
      return qdot::dot_mxfp4_scalar(n, w, x);
    case GgmlType::IQ4_XS:
      return qdot::dot_iq4_xs_scalar(n, w, x);
    default:
      unsupported("vec_dot_scalar", weight_type);
  }
}

}  // namespace kvscope
