// ggml type table, half/bfloat conversions and dequantization of the types kvscope reads.
// The quantizers live in quantize_ref.cpp; block layouts are in ggml_types.h.
#include "gguf/ggml_types.h"

#include "gguf/dequant_low_bit.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

// Dequantize like ggml's reference build: d*q - m rounded twice, not fused (see quantize_ref.cpp).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace kvscope {

namespace {

struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
};

// Every type id ggml has ever written into a GGUF file, with its block geometry. Knowing the
// geometry of types we cannot compute with still lets the reader validate their byte ranges.
// Ids 4, 5, 31-33 and 36-38 were removed from ggml and are "unknown" here on purpose.
constexpr TypeRow kTypes[] = {
    {0, {"f32", 1, 4, true}},          {1, {"f16", 1, 2, true}},
    {2, {"q4_0", 32, 18, true}},       {3, {"q4_1", 32, 20, true}},
    {6, {"q5_0", 32, 22, true}},       {7, {"q5_1", 32, 24, true}},
    {8, {"q8_0", 32, 34, true}},       {9, {"q8_1", 32, 36, false}},  // activations only,
    {10, {"q2_K", 256, 84, true}},     {11, {"q3_K", 256, 110, true}},
    {12, {"q4_K", 256, 144, true}},    {13, {"q5_K", 256, 176, true}},
    {14, {"q6_K", 256, 210, true}},    {15, {"q8_K", 256, 292, false}},  // activations only
    {16, {"iq2_xxs", 256, 66, false}}, {17, {"iq2_xs", 256, 74, false}},
    {18, {"iq3_xxs", 256, 98, false}}, {19, {"iq1_s", 256, 50, false}},
    {20, {"iq4_nl", 32, 18, true}},    {21, {"iq3_s", 256, 110, false}},
    {22, {"iq2_s", 256, 82, false}},   {23, {"iq4_xs", 256, 136, true}},
    {24, {"i8", 1, 1, false}},         {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},        {27, {"i64", 1, 8, false}},
    {28, {"f64", 1, 8, false}},        {29, {"iq1_m", 256, 56, false}},
    {30, {"bf16", 1, 2, true}},        {34, {"tq1_0", 256, 54, false}},
    {35, {"tq2_0", 256, 66, false}},   {39, {"mxfp4", 32, 17, true}},
};

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

void dequant_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[i * QK8_0 + j] = x[i].qs[j] * d;
  }
}

void dequant_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[i * QK4_0 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;            // low nibbles: first half
      y[i * QK4_0 + j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;  // high nibbles: second half
    }
  }
}

void dequant_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      y[i * QK4_1 + j] = (x[i].qs[j] & 0x0F) * d + m;
      y[i * QK4_1 + j + QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

// Q5_0/Q5_1: the fifth bit of element j is bit j of the 32-bit qh word (little endian).
uint32_t load_qh(const uint8_t qh[4]) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

void dequant_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int x0 = ((x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      const int x1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      y[i * QK5_0 + j] = x0 * d;
      y[i * QK5_0 + j + QK5_0 / 2] = x1 * d;
    }
  }
}

void dequant_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
      const int x1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[i * QK5_1 + j] = x0 * d + m;
      y[i * QK5_1 + j + QK5_1 / 2] = x1 * d + m;
    }
  }
}

void dequant_q8_1(const BlockQ8_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK8_1; ++j) y[i * QK8_1 + j] = x[i].qs[j] * d;
  }
}

void dequant_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    // 4 chunks of 64 values: 32 low nibbles (sub-block 2c) then 32 high nibbles (2c+1).
    for (int c = 0; c < 4; ++c) {
      int sc, m;
      q4_k_scale_min(2 * c, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      q4_k_scale_min(2 * c + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
    }
  }
}

// Like Q4_K, plus a fifth bit per value: qh[l] bit 2c holds value l of chunk c's low nibbles,
// bit 2c+1 value l of its high nibbles.
void dequant_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int c = 0; c < 4; ++c) {
      int sc, m;
      q4_k_scale_min(2 * c, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      q4_k_scale_min(2 * c + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c)), u2 = static_cast<uint8_t>(2u << (2 * c));
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
    }
  }
}

void dequant_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    // Two halves of 128 values; each qh byte holds the top 2 bits of 4 values 32 apart.
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void dequant_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < QK_K; ++j) y[i * QK_K + j] = x[i].d * x[i].qs[j];
}

// Blocks may sit at any byte offset in a file: copy them out instead of casting the pointer.
template <typename Block, typename Fn>
void dequant_blocks(const void* src, float* dst, int64_t n, int64_t block_elems, Fn fn) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  const int64_t nb = n / block_elems;
  Block tmp[8];
  for (int64_t i = 0; i < nb; i += 8) {
    const int64_t cnt = nb - i < 8 ? nb - i : 8;
    std::memcpy(tmp, bytes + i * sizeof(Block), static_cast<size_t>(cnt) * sizeof(Block));
    fn(tmp, dst + i * block_elems, cnt);
  }
}

}  // namespace

GgmlTypeInfo ggml_type_info(uint32_t raw_type) {
  for (const auto& row : kTypes)
    if (row.id == raw_type) return row.info;
  return {"unknown", 0, 0, false};
}

std::string ggml_type_name(uint32_t raw_type) {
  const GgmlTypeInfo info = ggml_type_info(raw_type);
  if (info.block_elems == 0) return "unknown type " + std::to_string(raw_type);
  return info.name;
}

bool ggml_type_supported(GgmlType t) { return ggml_type_info(t).supported; }

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const GgmlTypeInfo info = ggml_type_info(t);
  if (info.block_elems == 0 || n < 0) return 0;
  return static_cast<size_t>(n / info.block_elems) * info.block_bytes;
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t mant = h & 0x3FF;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7F800000u | (mant << 13));  // inf / NaN (payload kept)
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00 | static_cast<uint16_t>((ax >> 13) & 0x3FF);  // quiet NaN
  if (ax >= 0x477FF000u) return sign | 0x7C00;  // >= 65520 rounds (half-even) to infinity
  if (ax < 0x38800000u) {
    // Below f16's smallest normal (2^-14): the result is round(|f| * 2^24) in units of 2^-24.
    // Scaling by a power of two is exact, and lrintf rounds half to even.
    return sign | static_cast<uint16_t>(std::lrintf(std::fabs(f) * 16777216.0f));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits half-even.
  ax += 0xC8000FFFu + ((ax >> 13) & 1);
  return sign | static_cast<uint16_t>(ax >> 13);
}

float bf16_to_fp32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 64);  // force quiet
  return static_cast<uint16_t>((u + (0x7FFFu + ((u >> 16) & 1))) >> 16);
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
      }
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
      }
      return;
    case GgmlType::Q8_0:
      dequant_blocks<BlockQ8_0>(src, dst, n, QK8_0, dequant_q8_0);
      return;
    case GgmlType::Q4_0:
      dequant_blocks<BlockQ4_0>(src, dst, n, QK4_0, dequant_q4_0);
      return;
    case GgmlType::Q4_1:
      dequant_blocks<BlockQ4_1>(src, dst, n, QK4_1, dequant_q4_1);
      return;
    case GgmlType::Q5_0:
      dequant_blocks<BlockQ5_0>(src, dst, n, QK5_0, dequant_q5_0);
      return;
    case GgmlType::Q5_1:
      dequant_blocks<BlockQ5_1>(src, dst, n, QK5_1, dequant_q5_1);
      return;
    case GgmlType::Q8_1:
      dequant_blocks<BlockQ8_1>(src, dst, n, QK8_1, dequant_q8_1);
      return;
    case GgmlType::Q4_K:
      dequant_blocks<BlockQ4_K>(src, dst, n, QK_K, dequant_q4_k);
      return;
    case GgmlType::Q5_K:
      dequant_blocks<BlockQ5_K>(src, dst, n, QK_K, dequant_q5_k);
      return;
    case GgmlType::Q6_K:
      dequant_blocks<BlockQ6_K>(src, dst, n, QK_K, dequant_q6_k);
      return;
    case GgmlType::Q8_K:
      dequant_blocks<BlockQ8_K>(src, dst, n, QK_K, dequant_q8_k);
      return;
    case GgmlType::Q2_K:
      return dequant::q2_k(bytes, dst, n);
    case GgmlType::Q3_K:
      return dequant::q3_k(bytes, dst, n);
    case GgmlType::IQ4_NL:
      return dequant::iq4_nl(bytes, dst, n);
    case GgmlType::IQ4_XS:
      return dequant::iq4_xs(bytes, dst, n);
    case GgmlType::MXFP4:
      return dequant::mxfp4(bytes, dst, n);
    default:
      throw std::invalid_argument("dequantize_row: type " + ggml_type_name(static_cast<uint32_t>(t)) +
                                  " is not supported by kvscope");
  }
}

}  // namespace kvscope
