// Scalar dot kernels of the 2-, 3- and non-linear 4-bit weight types (the oracle of their SIMD
// kernels and of the GEMM): Q2_K, Q3_K and IQ4_XS against Q8_K activations, IQ4_NL and MXFP4
// against Q8_0, as ggml's CPU backend pairs them. Integer sums are exact per super-block (per block for
// IQ4_NL) and scaled once with an explicit std::fma, like the other K-quant kernels; ggml's
// reference scales per group of 8 lanes in float, so this is at least as exact.
#include <cmath>

#include "cpu/quant_dot_kernels.h"

namespace kvscope::qdot {

float dot_q2_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ2_K);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    uint8_t lv[QK_K];
    q2_k_levels(bw, lv);
    int16_t bsums[QK_K / 16];
    std::memcpy(bsums, bx + kQ8_KBsums, sizeof bsums);
    const auto* q8 = reinterpret_cast<const int8_t*>(bx + kQ8_KQs);
    int32_t sum_q = 0, sum_m = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t s = 0;
      for (int l = 0; l < 16; ++l) s += lv[16 * g + l] * q8[16 * g + l];
      sum_q += (bw[kQ2_KScales + g] & 0xF) * s;
      sum_m += (bw[kQ2_KScales + g] >> 4) * bsums[g];
    }
    const float dx = load_f32(bx);
    const float d = load_half(bw + kQ2_KD) * dx;
    const float dmin = load_half(bw + kQ2_KDmin) * dx;
    sum += std::fma(d, static_cast<float>(sum_q), -(dmin * static_cast<float>(sum_m)));
  }
  return sum;
}

float dot_q3_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ3_K);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    int8_t lv[QK_K], sc[16];
    q3_k_levels(bw, lv);
    q3_k_scales(bw + kQ3_KScales, sc);
    const auto* q8 = reinterpret_cast<const int8_t*>(bx + kQ8_KQs);
    int32_t sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t s = 0;
      for (int l = 0; l < 16; ++l) s += lv[16 * g + l] * q8[16 * g + l];
      sumi += sc[g] * s;
    }
    sum = std::fma(load_half(bw + kQ3_KD) * load_f32(bx), static_cast<float>(sumi), sum);
  }
  return sum;
}

float dot_iq4_nl_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK4_NL; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockIQ4_NL);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_0);
    const auto* q8 = reinterpret_cast<const int8_t*>(bx + kQ8_0Qs);
    int32_t sumi = 0;
    for (int j = 0; j < QK4_NL / 2; ++j) {
      const uint8_t q = bw[kIQ4_NLQs + j];
      sumi += kIq4nlValues[q & 0xF] * q8[j] + kIq4nlValues[q >> 4] * q8[j + QK4_NL / 2];
    }
    sum = std::fma(static_cast<float>(sumi), load_half(bw) * load_half(bx), sum);
  }
  return sum;
}

// IQ4_NL's form; the weight scale is a power of two, so dw * dx is exact and the block rounds once
// (ggml's reference rounds d * sumi and the sum separately).
float dot_mxfp4_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_MXFP4; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockMXFP4);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_0);
    const auto* q8 = reinterpret_cast<const int8_t*>(bx + kQ8_0Qs);
    int32_t sumi = 0;
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      const uint8_t q = bw[kMXFP4Qs + j];
      sumi += kMxfp4Values[q & 0xF] * q8[j] + kMxfp4Values[q >> 4] * q8[j + QK_MXFP4 / 2];
    }
    sum = std::fma(static_cast<float>(sumi), e8m0_to_fp32_half(bw[0]) * load_half(bx), sum);
  }
  return sum;
}

float dot_iq4_xs_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockIQ4_XS);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    const auto* q8 = reinterpret_cast<const int8_t*>(bx + kQ8_KQs);
    uint16_t scales_h;
    std::memcpy(&scales_h, bw + kIQ4_XSScalesH, 2);
    int32_t sumi = 0;
    for (int g = 0; g < 8; ++g) {
      const uint8_t* qs = bw + kIQ4_XSQs + 16 * g;
      int32_t s = 0;
      for (int j = 0; j < 16; ++j)
        s += kIq4nlValues[qs[j] & 0xF] * q8[32 * g + j] + kIq4nlValues[qs[j] >> 4] * q8[32 * g + j + 16];
      sumi += iq4_xs_scale(g, bw + kIQ4_XSScalesL, scales_h) * s;
    }
    sum = std::fma(load_half(bw) * load_f32(bx), static_cast<float>(sumi), sum);
  }
  return sum;
}

}  // namespace kvscope::qdot
