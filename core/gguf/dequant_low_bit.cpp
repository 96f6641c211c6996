// Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4 to f32 with ggml's reference arithmetic: each value is one
// product (minus one product for Q2_K's min), rounded separately, never fused.
#include "gguf/dequant_low_bit.h"

#include <cstring>

#include "gguf/ggml_types.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace kvscope::dequant {

namespace {
// Blocks may sit at any byte offset in a file: copy each one out instead of casting.
template <typename Block>
Block block_at(const uint8_t* src, int64_t i) {
  Block b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(Block)), sizeof b);
  return b;
}
}  // namespace

// 16 groups of 16: value = d * (sc & 15) * q - dmin * (sc >> 4). Group g of each 128-value half
// takes its 2-bit levels from bits 2 * (g / 2) of bytes 16 * (g % 2) + l of that half's 32 bytes.
void q2_k(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockQ2_K b = block_at<BlockQ2_K>(src, i);
    const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
    for (int g = 0; g < 16; ++g) {
      const uint8_t* q = b.qs + 32 * (g / 8) + 16 * (g % 2);
      const int shift = 2 * ((g % 8) / 2);
      const float dl = d * static_cast<float>(b.scales[g] & 0xF);
      const float ml = dmin * static_cast<float>(b.scales[g] >> 4);
      for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
    }
  }
}

// Same geometry as Q2_K; the third bit of group g's values is bit g / 2 of hmask[16 * (g % 2) + l]
// and a clear bit means level - 4.
void q3_k(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockQ3_K b = block_at<BlockQ3_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    int8_t sc[16];
    q3_k_scales(b.scales, sc);
    for (int g = 0; g < 16; ++g) {
      const uint8_t* q = b.qs + 32 * (g / 8) + 16 * (g % 2);
      const uint8_t* hm = b.hmask + 16 * (g % 2);
      const int shift = 2 * ((g % 8) / 2);
      const uint8_t bit = static_cast<uint8_t>(1u << (g / 2));
      const float dl = d * static_cast<float>(sc[g]);
      for (int l = 0; l < 16; ++l) {
        const int v = ((q[l] >> shift) & 3) - ((hm[l] & bit) ? 0 : 4);
        *y++ = dl * static_cast<float>(v);
      }
    }
  }
}

void iq4_nl(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK4_NL; ++i, y += QK4_NL) {
    const BlockIQ4_NL b = block_at<BlockIQ4_NL>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < QK4_NL / 2; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[b.qs[j] & 0xF]);
      y[j + QK4_NL / 2] = d * static_cast<float>(kIq4nlValues[b.qs[j] >> 4]);
    }
  }
}

// 8 groups of 32 like IQ4_NL blocks, each with its own six-bit scale under one f16 d.
void iq4_xs(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const BlockIQ4_XS b = block_at<BlockIQ4_XS>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int g = 0; g < 8; ++g, y += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(g, b.scales_l, b.scales_h));
      const uint8_t* qs = b.qs + 16 * g;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

// IQ4_NL's layout with a power-of-two scale: the product level * 2^(e-128) is exact unless it
// leaves the float range, so only ggml's operand order matters for the bits.
void mxfp4(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_MXFP4; ++i, y += QK_MXFP4) {
    const BlockMXFP4 b = block_at<BlockMXFP4>(src, i);
    const float d = e8m0_to_fp32_half(b.e);
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      y[j] = static_cast<float>(kMxfp4Values[b.qs[j] & 0xF]) * d;
      y[j + QK_MXFP4 / 2] = static_cast<float>(kMxfp4Values[b.qs[j] >> 4]) * d;
    }
  }
}

}  // namespace kvscope::dequant
