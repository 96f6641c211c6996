// Reference quantizers, written to reproduce llama.cpp's quantize_row_*_ref functions
// (ggml-quants.c) so that files we write match llama-quantize's output for the same f32 input
// and activations are rounded the way the CPU backend rounds them. The search heuristics
// (make_qkx2_quants for Q4_K, make_qx_quants for Q6_K) are part of the format's de-facto
// definition: a different but "better" search would give different bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "gguf/ggml_types.h"

// llama.cpp's reference build evaluates these searches without fused multiply-adds; with FMA
// contraction (GCC's default here) about 1% of K-quant blocks come out different, because
// near-ties in the scale search flip. Keep every product rounded on its own.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace kvscope {

namespace {

constexpr float kGroupMaxEps = 1e-15f;

// ggml's nearest_int adds 1.5*2^23 and reads the mantissa: that is round-half-even for
// |x| < 2^22, which is exactly what lrintf does in the default rounding mode.
inline int nearest_int(float x) { return static_cast<int>(std::lrintf(x)); }

void store_half(uint8_t* p, float f) {
  const uint16_t h = fp32_to_fp16(f);
  std::memcpy(p, &h, 2);
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    // roundf: half away from zero, as the reference (not the activation path) does.
    for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

// The value of largest magnitude, with its sign (the first one on ties, as ggml).
float signed_extreme(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

std::pair<float, float> min_max(const float* x, int n) {
  float min = std::numeric_limits<float>::max(), max = -std::numeric_limits<float>::max();
  for (int j = 0; j < n; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  return {min, max};
}

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
    // The signed value of largest magnitude maps to -8, so the full [-8, 7] range is used.
    const float d = signed_extreme(x, QK4_0) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      // Truncation of (v + 8.5) through int8 is ggml's rounding; keep it bit for bit.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + QK4_0 / 2] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Asymmetric 4-bit: levels 0..15 between the block's min and max, value = d * q + m.
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_1) {
    const auto [min, max] = min_max(x, QK4_1);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      // Truncation of (v + 0.5) through int8, then a clamp: ggml's rounding, bit for bit.
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + QK4_1 / 2] - min) * id + 0.5f)));
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Stores 32 five-bit levels: low nibbles in qs (element j and j+16 share byte j), fifth bits
// in the little-endian word qh (bit j for element j).
template <typename Block>
void pack_q5(const uint8_t* levels, Block& b) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    b.qs[j] = static_cast<uint8_t>((levels[j] & 0x0F) | ((levels[j + 16] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((levels[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((levels[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(b.qh, &qh, 4);
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK5_0) {
    // As Q4_0: the signed extreme maps to -16 so the whole [-16, 15] range is used.
    const float d = signed_extreme(x, QK5_0) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    uint8_t levels[QK5_0];
    for (int j = 0; j < QK5_0; ++j)
      levels[j] = static_cast<uint8_t>(std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f))));
    pack_q5(levels, y[i]);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK5_1) {
    const auto [min, max] = min_max(x, QK5_1);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    uint8_t levels[QK5_1];
    // No clamp here in ggml: (x - min) * id is at most 31 up to rounding, so + 0.5 stays < 32.
    for (int j = 0; j < QK5_1; ++j) levels[j] = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
    pack_q5(levels, y[i]);
  }
}

// The reference Q8_1 (roundf, 1/d): used for test files; the CPU backend's activation path is
// in quant_dot.cpp. s = d * sum(qs) lets Q4_1/Q5_1 dots add the min term without a second pass.
void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK8_1) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < QK8_1; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

// Fits x ~ scale * L + min (min <= 0) with L in [0, nmax], minimising the weighted squared
// error over a small grid of candidate inverse scales. Returns scale; *the_min = -min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      // Weighted least squares for (scale, min) given these levels.
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        std::memcpy(L, Laux, static_cast<size_t>(n));
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Symmetric fit x ~ scale * (L - nmax) with L - nmax in [-nmax, nmax-1]; rmse_type 1 weights the
// error by x^2 and tries 18 perturbed inverse scales around nmax / max.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, int rmse_type) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = -nmax / max;
  auto weight = [&](float v) {
    return rmse_type == 1 ? v * v : rmse_type == 2 ? 1.0f : rmse_type == 3 ? std::fabs(v) : std::sqrt(std::fabs(v));
  };
  if (rmse_type == 0) {
    for (int i = 0; i < n; ++i) {
      const int l = nearest_int(iscale * x[i]);
      L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
    }
    return 1 / iscale;
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = weight(x[i]);
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = weight(x[i]);
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  uint8_t L[QK_K], Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float max_scale = 0, max_min = 0;  // the min is subtracted, so scales are never negative
    for (int j = 0; j < QK_K / 32; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20, false);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    // Sub-block scales and mins are themselves quantized to 6 bits against the block maxima.
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    std::memset(y[i].scales, 0, K_SCALE_SIZE);
    for (int j = 0; j < QK_K / 32; ++j) {
      // Narrow to uint8 before clamping, as ggml does (a negative fit wraps, then clamps to 63).
      const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
      const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
      if (j < 4) {
        y[i].scales[j] = ls;
        y[i].scales[j + 4] = lm;
      } else {
        y[i].scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        y[i].scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        y[i].scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    y[i].d = fp32_to_fp16(max_scale / 63.0f);
    y[i].dmin = fp32_to_fp16(max_min / 63.0f);
    // Re-derive the levels against the rounded scales actually stored.
    for (int j = 0; j < QK_K / 32; ++j) {
      int sc, m;
      q4_k_scale_min(j, y[i].scales, sc, m);
      const float d = fp16_to_fp32(y[i].d) * sc;
      if (d == 0.0f) continue;
      const float dm = fp16_to_fp32(y[i].dmin) * m;
      for (int ii = 0; ii < 32; ++ii) {
        const int l = nearest_int((x[32 * j + ii] + dm) / d);
        L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(15, l)));
      }
    }
    uint8_t* q = y[i].qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

// Packs 8 (scale, min) 6-bit pairs into the 12 bytes shared by Q4_K and Q5_K.
void pack_k4_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t* scales) {
  for (int j = 0; j < QK_K / 32; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Q4_K's recipe with 5-bit levels (nmax 31) and a narrower scale search (-0.5, 15 steps), as ggml.
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  uint8_t L[QK_K], Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
      scales[j] = make_qkx2_quants(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < QK_K / 32; ++j) {
      ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
      lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    }
    std::memset(y[i].scales, 0, K_SCALE_SIZE);
    pack_k4_scales(ls, lm, y[i].scales);
    y[i].d = fp32_to_fp16(max_scale / 63.0f);
    y[i].dmin = fp32_to_fp16(max_min / 63.0f);
    for (int j = 0; j < QK_K / 32; ++j) {
      int sc, m;
      q4_k_scale_min(j, y[i].scales, sc, m);
      const float d = fp16_to_fp32(y[i].d) * sc;
      if (d == 0.0f) continue;
      const float dm = fp16_to_fp32(y[i].dmin) * m;
      for (int ii = 0; ii < 32; ++ii) {
        const int l = nearest_int((x[32 * j + ii] + dm) / d);
        L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(31, l)));
      }
    }
    // Chunk c of 64 values: low nibbles of qs[32c..] are values 0-31 (fifth bit in qh bit 2c),
    // high nibbles values 32-63 (fifth bit in qh bit 2c+1).
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    uint8_t* ql = y[i].qs;
    for (int c = 0; c < 4; ++c, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[64 * c + j], l2 = L[64 * c + j + 32];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[j] |= static_cast<uint8_t>(1u << (2 * c));
        }
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[j] |= static_cast<uint8_t>(2u << (2 * c));
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
      scales[ib] = scale;
      if (std::fabs(scale) > max_abs_scale) {
        max_abs_scale = std::fabs(scale);
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib)
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16_to_fp32(y[i].d) * y[i].scales[j];
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int(x[16 * j + ii] / d);
        L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
      }
    }
    // Low 4 bits: values l and l+64 share a ql byte (l and l+32 in the second ql row);
    // high 2 bits: values l, l+32, l+64, l+96 share one qh byte.
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
        const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                     ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));  // ggml leaves bsums stale here; zero is safer
      continue;
    }
    // -127 (not -128) keeps every value in [-127, 127], which the SIMD sign tricks rely on.
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

// Quantizes into an aligned local block array and copies out, so dst needs no alignment.
template <typename Block, typename Fn>
void quantize_blocks(const float* src, void* dst, int64_t n, int64_t block_elems, Fn fn) {
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t nb = n / block_elems;
  Block tmp[4];
  for (int64_t i = 0; i < nb; i += 4) {
    const int64_t cnt = std::min<int64_t>(4, nb - i);
    fn(src + i * block_elems, tmp, cnt);
    std::memcpy(out + i * sizeof(Block), tmp, static_cast<size_t>(cnt) * sizeof(Block));
  }
}

}  // namespace

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) store_half(out + 2 * i, src[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = fp32_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case GgmlType::Q8_0:
      quantize_blocks<BlockQ8_0>(src, dst, n, QK8_0, quantize_q8_0);
      return;
    case GgmlType::Q4_0:
      quantize_blocks<BlockQ4_0>(src, dst, n, QK4_0, quantize_q4_0);
      return;
    case GgmlType::Q4_1:
      quantize_blocks<BlockQ4_1>(src, dst, n, QK4_1, quantize_q4_1);
      return;
    case GgmlType::Q5_0:
      quantize_blocks<BlockQ5_0>(src, dst, n, QK5_0, quantize_q5_0);
      return;
    case GgmlType::Q5_1:
      quantize_blocks<BlockQ5_1>(src, dst, n, QK5_1, quantize_q5_1);
      return;
    case GgmlType::Q8_1:
      quantize_blocks<BlockQ8_1>(src, dst, n, QK8_1, quantize_q8_1);
      return;
    case GgmlType::Q4_K:
      quantize_blocks<BlockQ4_K>(src, dst, n, QK_K, quantize_q4_k);
      return;
    case GgmlType::Q5_K:
      quantize_blocks<BlockQ5_K>(src, dst, n, QK_K, quantize_q5_k);
      return;
    case GgmlType::Q6_K:
      quantize_blocks<BlockQ6_K>(src, dst, n, QK_K, quantize_q6_k);
      return;
    case GgmlType::Q8_K:
      quantize_blocks<BlockQ8_K>(src, dst, n, QK_K, quantize_q8_k);
      return;
    default:
      throw std::invalid_argument("quantize_row: kvscope cannot quantize to " +
                                  ggml_type_name(static_cast<uint32_t>(t)));
  }
}

}  // namespace kvscope
