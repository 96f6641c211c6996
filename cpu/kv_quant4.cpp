#include "cpu/kv_quant4.h"

#include <array>
#include <cmath>
#include <cstring>

#include "cpu/kv_quant4_simd.h"
#include "gguf/ggml_types.h"

namespace kvscope::kvq4 {

namespace {

constexpr float kF16Max = 65504.0f;

uint16_t f16_of(float x) { return fp32_to_fp16(x > kF16Max ? kF16Max : x); }
float f32_of(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}
void put_f16(uint8_t* p, float x) {
  const uint16_t h = f16_of(x);
  std::memcpy(p, &h, 2);
}

// Round half away from zero is fine here: codes only need to be within half a step.
int32_t round_clamp(float v, int32_t lo, int32_t hi) {
  const auto r = static_cast<int32_t>(std::lround(v));
  return r < lo ? lo : (r > hi ? hi : r);
}

void put_code(uint8_t* codes, int32_t i, int32_t bits, uint32_t c) {
  const int32_t bit = i * bits;
  codes[bit >> 3] = static_cast<uint8_t>(codes[bit >> 3] | (c << (bit & 7)));
}
uint32_t get_code(const uint8_t* codes, int32_t i, int32_t bits) {
  const int32_t bit = i * bits;
  return (codes[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1u);
}

// The Walsh-Hadamard butterflies, stage by stage (len 1, 2, 4, ...), each pair (j, j + len) as
// a + b, a - b. The first two stages run together per group of 4 elements and the others with a
// contiguous inner loop the compiler vectorises: the same operations on the same pairs as the
// plain stage loop, so the same bits (attention rotates every query head and output with this,
// and the CUDA kernels hold their rotation to it).
void fwht(float* x, int32_t d) {
  int32_t len = 1;
  if (d >= 4) {
    for (int32_t i = 0; i < d; i += 4) {
      const float a0 = x[i] + x[i + 1], a1 = x[i] - x[i + 1], a2 = x[i + 2] + x[i + 3], a3 = x[i + 2] - x[i + 3];
      x[i] = a0 + a2;
      x[i + 1] = a1 + a3;
      x[i + 2] = a0 - a2;
      x[i + 3] = a1 - a3;
    }
    len = 4;
  }
  for (; len < d; len <<= 1)
    for (int32_t i = 0; i < d; i += len << 1) {
      float* __restrict lo = x + i;
      float* __restrict hi = x + i + len;
      for (int32_t j = 0; j < len; ++j) {
        const float a = lo[j], b = hi[j];
        lo[j] = a + b;
        hi[j] = a - b;
      }
    }
}

float splitmix_sign(int32_t i) {
  // splitmix64 of the index: fixed, well mixed.
  uint64_t z = static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((z ^ (z >> 31)) & 1u) ? -1.0f : 1.0f;
}

constexpr int32_t kMaxRotationDim = 512;  // head_dim <= 512 (kv_format_problem)

// D's diagonal for the head sizes attention uses, computed once.
const float* sign_table() {
  static const auto table = [] {
    std::array<float, kMaxRotationDim> t{};
    for (int32_t i = 0; i < kMaxRotationDim; ++i) t[static_cast<size_t>(i)] = splitmix_sign(i);
    return t;
  }();
  return table.data();
}

// (scale, min) of values lo..hi on `levels` steps, both as stored (f16-rounded).
void asym_params(float lo, float hi, int32_t levels, float* scale, float* mn) {
  *mn = fp16_to_fp32(f16_of(lo));
  *scale = fp16_to_fp32(f16_of((hi - *mn) / static_cast<float>(levels)));
}

}  // namespace

float rotation_sign(int32_t i) { return i < kMaxRotationDim ? sign_table()[i] : splitmix_sign(i); }

namespace {

// x[i] *= factor * D_i, D from the table up to kMaxRotationDim (a loop the compiler vectorises;
// factor 1 multiplies by the signs alone, exactly).
void multiply_signs(float* x, int32_t d, float factor) {
  if (d > kMaxRotationDim) {
    for (int32_t i = 0; i < d; ++i) x[i] *= factor * splitmix_sign(i);
    return;
  }
  const float* sign = sign_table();
  for (int32_t i = 0; i < d; ++i) x[i] *= factor * sign[i];
}

}  // namespace

void rotate(float* x, int32_t d) {
  multiply_signs(x, d, 1.0f);
  fwht(x, d);
  const float s = 1.0f / std::sqrt(static_cast<float>(d));
  for (int32_t i = 0; i < d; ++i) x[i] *= s;
}

void unrotate(float* x, int32_t d) {
  fwht(x, d);  // H is symmetric and H H = d I
  multiply_signs(x, d, 1.0f / std::sqrt(static_cast<float>(d)));
}

namespace {

float group_amax(const float* x, int32_t g0, int32_t g) {
  float amax = 0.0f;
  for (int32_t i = g0; i < g0 + g; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

// The 4-bit codes of x[g0, g0 + g) at scale s (of either sign), clamped to lo..7, into the row's
// code bytes (zeroed before). A zero (or NaN) scale stores code 0 for every element.
void put_int4_group(const float* x, int32_t g0, int32_t g, float s, int32_t lo, uint8_t* row) {
  const bool any = s > 0.0f || s < 0.0f;
  for (int32_t i = g0; i < g0 + g; ++i) {
    const int32_t q = any ? round_clamp(x[i] / s, lo, kInt4Max) : 0;
    put_code(row, i, 4, static_cast<uint32_t>(q + 8));
  }
}

}  // namespace

void encode_int4_row_fitted(const float* x, int32_t d, int32_t g, uint8_t* row) {
  std::memset(row, 0, static_cast<size_t>(d / 2));
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    const float amax = group_amax(x, g0, g);
    float best = 0.0f, best_err = INFINITY;
    for (int32_t step = 0; step <= 12 && amax > 0.0f; ++step)
      for (const float sign : {1.0f, -1.0f}) {  // -1: the -8 code lands on the positive side
        const float s =
            sign * fp16_to_fp32(f16_of(amax / (static_cast<float>(kInt4Max) + 0.25f * static_cast<float>(step))));
        if (s == 0.0f) continue;
        float err = 0.0f;
        for (int32_t i = g0; i < g0 + g; ++i) {
          const float e = x[i] - s * static_cast<float>(round_clamp(x[i] / s, -8, kInt4Max));
          err += e * e;
        }
        if (err < best_err) best_err = err, best = s;
      }
    put_int4_group(x, g0, g, best, -8, row);
    put_f16(row + d / 2 + 2 * (g0 / g), best);
  }
}

void center_rows(float* x, int32_t n, int32_t d, uint8_t* center) {
  for (int32_t c = 0; c < d; ++c) {
    double sum = 0.0;
    for (int32_t r = 0; r < n; ++r) sum += x[static_cast<int64_t>(r) * d + c];
    put_f16(center + 2 * c, std::fmax(static_cast<float>(sum / n), -kF16Max));
    const float m = f32_of(center + 2 * c);
    for (int32_t r = 0; r < n; ++r) x[static_cast<int64_t>(r) * d + c] -= m;
  }
}

void add_center(const uint8_t* center, int32_t n, int32_t d, float* y) {
  float m[kMaxRotationDim];
  for (int32_t c = 0; c < d; ++c) m[c] = f32_of(center + 2 * c);
  for (int32_t r = 0; r < n; ++r) {
    float* __restrict row = y + static_cast<int64_t>(r) * d;
    for (int32_t c = 0; c < d; ++c) row[c] += m[c];
  }
}

void encode_int4_row(const float* x, int32_t d, int32_t g, uint8_t* row) {
  std::memset(row, 0, static_cast<size_t>(d / 2));
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    const float s = fp16_to_fp32(f16_of(group_amax(x, g0, g) / kInt4Max));
    put_int4_group(x, g0, g, s, -kInt4Max, row);
    put_f16(row + d / 2 + 2 * (g0 / g), s);
  }
}

void decode_int4_row_scalar(const uint8_t* row, int32_t d, int32_t g, float* y) {
  const uint8_t* scales = row + d / 2;
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    const float s = f32_of(scales + 2 * (g0 / g));
    for (int32_t i = g0; i < g0 + g; i += 2) {  // g is even: a byte never straddles groups
      const uint8_t b = row[i >> 1];
      y[i] = static_cast<float>(static_cast<int32_t>(b & 15u) - 8) * s;
      y[i + 1] = static_cast<float>(static_cast<int32_t>(b >> 4) - 8) * s;
    }
  }
}

void encode_asym_row(const float* x, int32_t d, int32_t g, int32_t bits, uint8_t* row) {
  const int32_t code_bytes = d * bits / 8, levels = (1 << bits) - 1;
  uint8_t* params = row + code_bytes;
  std::memset(row, 0, static_cast<size_t>(code_bytes));
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    float lo = x[g0], hi = x[g0];
    for (int32_t i = g0; i < g0 + g; ++i) lo = std::fmin(lo, x[i]), hi = std::fmax(hi, x[i]);
    float s, mn;
    asym_params(lo, hi, levels, &s, &mn);
    put_f16(params + 4 * (g0 / g), s);
    put_f16(params + 4 * (g0 / g) + 2, mn);
    for (int32_t i = g0; i < g0 + g; ++i)
      put_code(row, i, bits, static_cast<uint32_t>(s > 0.0f ? round_clamp((x[i] - mn) / s, 0, levels) : 0));
  }
}

void decode_asym_row_scalar(const uint8_t* row, int32_t d, int32_t g, int32_t bits, float* y) {
  const uint8_t* params = row + d * bits / 8;
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    const float s = f32_of(params + 4 * (g0 / g)), mn = f32_of(params + 4 * (g0 / g) + 2);
    for (int32_t i = g0; i < g0 + g; ++i) y[i] = std::fma(static_cast<float>(get_code(row, i, bits)), s, mn);
  }
}

void encode_channel_tile(const float* x, int32_t n, int32_t d, int32_t bits, uint8_t* codes, int64_t code_stride,
                         uint8_t* params) {
  const int32_t levels = (1 << bits) - 1;
  for (int32_t r = 0; r < n; ++r) std::memset(codes + r * code_stride, 0, static_cast<size_t>(d * bits / 8));
  for (int32_t c = 0; c < d; ++c) {
    float lo = x[c], hi = x[c];
    for (int32_t r = 0; r < n; ++r)
      lo = std::fmin(lo, x[static_cast<int64_t>(r) * d + c]), hi = std::fmax(hi, x[static_cast<int64_t>(r) * d + c]);
    float s, mn;
    asym_params(lo, hi, levels, &s, &mn);
    put_f16(params + 4 * c, s);
    put_f16(params + 4 * c + 2, mn);
    for (int32_t r = 0; r < n; ++r) {
      const float v = x[static_cast<int64_t>(r) * d + c];
      put_code(codes + r * code_stride, c, bits,
               static_cast<uint32_t>(s > 0.0f ? round_clamp((v - mn) / s, 0, levels) : 0));
    }
  }
}

void decode_channel_rows_scalar(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n, int32_t d,
                                int32_t bits, float* y) {
  float s[512], mn[512];  // head_dim <= 512 (checked by the storage)
  for (int32_t c = 0; c < d; ++c) s[c] = f32_of(params + 4 * c), mn[c] = f32_of(params + 4 * c + 2);
  for (int32_t r = 0; r < n; ++r) {
    const uint8_t* row = codes + r * code_stride;
    float* out = y + static_cast<int64_t>(r) * d;
    for (int32_t c = 0; c < d; ++c) out[c] = std::fma(static_cast<float>(get_code(row, c, bits)), s[c], mn[c]);
  }
}

void decode_f16_rows_scalar(const uint16_t* h, int32_t n, int32_t d, float* y) {
  for (int64_t i = 0; i < static_cast<int64_t>(n) * d; ++i) y[i] = fp16_to_fp32(h[i]);
}

// The decoders attention calls, once per K/V row: the AVX-512 forms (cpu/kv_quant4_avx512.cpp)
// or the AVX2 ones (cpu/kv_quant4_simd.cpp) where the CPU has them and the shape fits their
// 16- or 8-lane steps, the scalar reference elsewhere.
namespace {

using Int4Decoder = void (*)(const uint8_t*, int32_t, int32_t, float*);
using AsymDecoder = void (*)(const uint8_t*, int32_t, int32_t, int32_t, float*);

Int4Decoder int4_decoder(int32_t g) {
  if (avx512::available() && g % 16 == 0) return avx512::decode_int4_row;
  if (simd::available() && g % 8 == 0) return simd::decode_int4_row;
  return decode_int4_row_scalar;
}
AsymDecoder asym_decoder(int32_t g) {
  if (avx512::available() && g % 16 == 0) return avx512::decode_asym_row;
  if (simd::available() && g % 8 == 0) return simd::decode_asym_row;
  return decode_asym_row_scalar;
}

}  // namespace

void decode_int4_row(const uint8_t* row, int32_t d, int32_t g, float* y) { int4_decoder(g)(row, d, g, y); }
void decode_asym_row(const uint8_t* row, int32_t d, int32_t g, int32_t bits, float* y) {
  asym_decoder(g)(row, d, g, bits, y);
}
void decode_int4_rows(const uint8_t* rows, int64_t stride, int32_t n, int32_t d, int32_t g, float* y) {
  const Int4Decoder decode = int4_decoder(g);
  for (int32_t r = 0; r < n; ++r) decode(rows + r * stride, d, g, y + static_cast<int64_t>(r) * d);
}
void decode_int4_rows_centered(const uint8_t* rows, int64_t stride, int32_t n, int32_t d, int32_t g,
                               const uint8_t* center, float* y) {
  if (!(avx512::available() && g % 16 == 0)) {
    decode_int4_rows(rows, stride, n, d, g, y);
    return add_center(center, n, d, y);
  }
  uint16_t h[kMaxRotationDim];
  std::memcpy(h, center, sizeof(uint16_t) * static_cast<size_t>(d));
  float m[kMaxRotationDim];
  decode_f16_rows(h, 1, d, m);
  avx512::decode_int4_rows_plus(rows, stride, n, d, g, m, y);
}

void decode_asym_rows(const uint8_t* rows, int64_t stride, int32_t n, int32_t d, int32_t g, int32_t bits, float* y) {
  const AsymDecoder decode = asym_decoder(g);
  for (int32_t r = 0; r < n; ++r) decode(rows + r * stride, d, g, bits, y + static_cast<int64_t>(r) * d);
}
void decode_channel_rows(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n, int32_t d,
                         int32_t bits, float* y) {
  if (avx512::available() && d % 16 == 0) return avx512::decode_channel_rows(codes, code_stride, params, n, d, bits, y);
  if (simd::available() && d % 8 == 0) return simd::decode_channel_rows(codes, code_stride, params, n, d, bits, y);
  decode_channel_rows_scalar(codes, code_stride, params, n, d, bits, y);
}
void decode_f16_rows(const uint16_t* h, int32_t n, int32_t d, float* y) {
  if (avx512::available()) return avx512::decode_f16_rows(h, n, d, y);
  if (simd::available()) return simd::decode_f16_rows(h, n, d, y);
  decode_f16_rows_scalar(h, n, d, y);
}

}  // namespace kvscope::kvq4
