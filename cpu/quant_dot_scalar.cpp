// Scalar dot kernels: the oracle the SIMD kernels are tested against, and the fallback on CPUs
// without AVX2. Quantized kernels sum exact int32 products per block and scale once per block,
// like ggml; the float kernels accumulate in double so they are a tighter reference than f32.
// Block scaling is an explicit std::fma: GCC contracts a * b + c into an FMA wherever the target
// has one (it does so even in ISO mode), so a plain expression would round differently in a
// portable build than in a native one, and than the GEMM kernels (cpu/gemm.h), which match
// these bit for bit.
#include "cpu/quant_dot_kernels.h"

#include <cmath>

namespace kvscope::qdot {

float dot_f32_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(load_f32(w + 4 * i)) * load_f32(x + 4 * i);
  return static_cast<float>(sum);
}

float dot_f16_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(load_half(w + 2 * i)) * load_half(x + 2 * i);
  return static_cast<float>(sum);
}

float dot_bf16_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t a, b;
    std::memcpy(&a, w + 2 * i, 2);
    std::memcpy(&b, x + 2 * i, 2);
    sum += static_cast<double>(bf16_to_fp32(a)) * bf16_to_fp32(b);
  }
  return static_cast<float>(sum);
}

float dot_q8_0_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ8_0);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_0);
    int32_t sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += static_cast<int8_t>(bw[kQ8_0Qs + j]) * static_cast<int8_t>(bx[kQ8_0Qs + j]);
    sum = std::fma(static_cast<float>(sumi), load_half(bw) * load_half(bx), sum);
  }
  return sum;
}

float dot_q4_0_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK4_0; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ4_0);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_0);
    int32_t sumi = 0;
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int v0 = (bw[kQ4_0Qs + j] & 0x0F) - 8;  // element j
      const int v1 = (bw[kQ4_0Qs + j] >> 4) - 8;    // element j + 16
      sumi += v0 * static_cast<int8_t>(bx[kQ8_0Qs + j]) + v1 * static_cast<int8_t>(bx[kQ8_0Qs + j + QK4_0 / 2]);
    }
    sum = std::fma(static_cast<float>(sumi), load_half(bw) * load_half(bx), sum);
  }
  return sum;
}

// value = d * q + m, so w.x = d * dy * sum(q * qy) + m * (dy * sum(qy)); the activation block
// carries s = dy * sum(qy).
float dot_q4_1_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK4_1; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ4_1);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_1);
    int32_t sumi = 0;
    for (int j = 0; j < QK4_1 / 2; ++j) {
      sumi += (bw[kQ4_1Qs + j] & 0x0F) * static_cast<int8_t>(bx[kQ8_1Qs + j]) +
              (bw[kQ4_1Qs + j] >> 4) * static_cast<int8_t>(bx[kQ8_1Qs + j + QK4_1 / 2]);
    }
    sum += static_cast<float>(sumi) * (load_half(bw) * load_half(bx)) + load_half(bw + kQ4_1M) * load_half(bx + kQ8_1S);
  }
  return sum;
}

float dot_q5_0_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK5_0; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ5_0);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_0);
    const uint32_t qh = load_u32(bw + kQ5_0Qh);
    int32_t sumi = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int v0 = ((bw[kQ5_0Qs + j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      const int v1 = ((bw[kQ5_0Qs + j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      sumi += v0 * static_cast<int8_t>(bx[kQ8_0Qs + j]) + v1 * static_cast<int8_t>(bx[kQ8_0Qs + j + QK5_0 / 2]);
    }
    sum = std::fma(static_cast<float>(sumi), load_half(bw) * load_half(bx), sum);
  }
  return sum;
}

float dot_q5_1_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK5_1; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ5_1);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_1);
    const uint32_t qh = load_u32(bw + kQ5_1Qh);
    int32_t sumi = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int v0 = (bw[kQ5_1Qs + j] & 0x0F) | (((qh >> j) & 1) << 4);
      const int v1 = (bw[kQ5_1Qs + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      sumi += v0 * static_cast<int8_t>(bx[kQ8_1Qs + j]) + v1 * static_cast<int8_t>(bx[kQ8_1Qs + j + QK5_1 / 2]);
    }
    sum += static_cast<float>(sumi) * (load_half(bw) * load_half(bx)) + load_half(bw + kQ5_1M) * load_half(bx + kQ8_1S);
  }
  return sum;
}

namespace {
// Q4_K and Q5_K: 8 sub-blocks of 32 unsigned levels with 6-bit scales and mins,
// value = d*sc*q - dmin*m, so the min term only needs the activation sums per 32 values.
// level(bw, j, l) is level l of sub-block j of the weight block at bw.
template <typename Level>
float dot_k_affine_scalar(int64_t n, size_t block_bytes, size_t scales_off, size_t dmin_off, const uint8_t* w,
                          const uint8_t* x, Level level) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * block_bytes;
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    uint8_t sc[8], m[8];
    unpack_q4_k_scales(bw + scales_off, sc, m);
    int16_t bsums[QK_K / 16];
    std::memcpy(bsums, bx + kQ8_KBsums, sizeof bsums);
    const int8_t* q8 = reinterpret_cast<const int8_t*>(bx + kQ8_KQs);
    int32_t sum_q = 0, sum_m = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += level(bw, j, l) * q8[j * 32 + l];
      sum_q += sc[j] * s;
      sum_m += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    const float dx = load_f32(bx);
    const float d = load_half(bw) * dx;
    const float dmin = load_half(bw + dmin_off) * dx;
    sum += std::fma(d, static_cast<float>(sum_q), -(dmin * static_cast<float>(sum_m)));
  }
  return sum;
}
}  // namespace

float dot_q4_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  // Even sub-blocks are the low nibbles of 32 bytes, odd ones the high nibbles of the same bytes.
  return dot_k_affine_scalar(n, sizeof(BlockQ4_K), kQ4_KScales, kQ4_KDmin, w, x, [](const uint8_t* bw, int j, int l) {
    return (bw[kQ4_KQs + (j / 2) * 32 + l] >> ((j & 1) * 4)) & 0xF;
  });
}

float dot_q5_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  // As Q4_K; the fifth bit of sub-block j is bit j of qh[l].
  return dot_k_affine_scalar(n, sizeof(BlockQ5_K), kQ5_KScales, kQ5_KDmin, w, x, [](const uint8_t* bw, int j, int l) {
    return ((bw[kQ5_KQs + (j / 2) * 32 + l] >> ((j & 1) * 4)) & 0xF) | (((bw[kQ5_KQh + l] >> j) & 1) << 4);
  });
}

float dot_q6_k_scalar(int64_t n, const uint8_t* w, const uint8_t* x) {
  float sum = 0;
  for (int64_t ib = 0; ib < n / QK_K; ++ib) {
    const uint8_t* bw = w + ib * sizeof(BlockQ6_K);
    const uint8_t* bx = x + ib * sizeof(BlockQ8_K);
    const int8_t* q8 = reinterpret_cast<const int8_t*>(bx + kQ8_KQs);
    int8_t sc[QK_K / 16];
    std::memcpy(sc, bw + kQ6_KScales, sizeof sc);
    int32_t sumi = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = bw + kQ6_KQl + 64 * half;
      const uint8_t* qh = bw + kQ6_KQh + 32 * half;
      const int8_t* y = q8 + 128 * half;
      const int8_t* s = sc + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        sumi += s[is + 0] * q1 * y[l] + s[is + 2] * q2 * y[l + 32] + s[is + 4] * q3 * y[l + 64] +
                s[is + 6] * q4 * y[l + 96];
      }
    }
    sum = std::fma(load_half(bw + kQ6_KD) * load_f32(bx), static_cast<float>(sumi), sum);
  }
  return sum;
}

}  // namespace kvscope::qdot
