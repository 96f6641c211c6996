#pragma once
// The per-element math of the packed 4/2-bit KV formats (int4, rot4, kivi4, kivi2) as
// `KVSCOPE_HD inline` functions, so the CUDA store/attention kernels and the host run the same
// code: f16 parameter encode/decode, code rounding, bit packing, rot4's sign and Walsh-Hadamard
// transform, and whole-row encoders built from them. They reproduce cpu/kv_quant4.cpp
// (the CPU backend's codecs) bit for bit; tests/cuda/test_cuda_host_math.cpp checks that on random
// rows against the CPU functions themselves. Layout reminders (kv/kv_dtype.h):
//  * codes little-end first: element i in byte i*bits/8 at bit (i*bits)%8;
//  * int4/rot4 row: [d/2 code bytes][d/g f16 scales]; code = q + 8, q in -7..7;
//  * kivi values row: [d*bits/8 codes][d/g x (f16 scale, f16 min)];
//  * kivi keys tile: block_size rows of d*bits/8 codes, then d x (f16 scale, f16 min).
// f16 bytes are little-endian (the CPU memcpy's them on x86); they are read and written byte by
// byte here because packed rows are not 2-byte aligned in general.
#include <cmath>
#include <cstdint>

#include "../core/kv/kv_quant.h"  // KVSCOPE_HD, bits_of / float_of

namespace kvscope::kvq4math {

constexpr int32_t kInt4Max = 7;
constexpr float kF16Max = 65504.0f;

// ---- f16 -------------------------------------------------------------------------------------

// Round to nearest even, as core's fp32_to_fp16 (gguf/ggml_types.cpp), bit for bit (NaN: quiet,
// payload kept; >= 65520 -> inf; subnormals by rint of |f| * 2^24).
KVSCOPE_HD inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = kvq::bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (ax < 0x38800000u) {
    const float m = kvq::float_of(ax) * 16777216.0f;  // exact (power of two), < 1024
#if defined(__CUDA_ARCH__)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(__float2int_rn(m)));
#else
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::lrintf(m)));  // default mode: half-even
#endif
  }
  ax += 0xC8000FFFu + ((ax >> 13) & 1u);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(ax >> 13));
}

KVSCOPE_HD inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu) return kvq::float_of(sign | 0x7F800000u | (m << 13));
  if (e == 0) {  // zero / subnormal: m * 2^-24, exact in f32
    const float v = static_cast<float>(m) * (1.0f / 16777216.0f);
    return kvq::float_of(sign | kvq::bits_of(v));
  }
  return kvq::float_of(sign | ((e + 112u) << 23) | (m << 13));
}

// A stored parameter: the CPU clamps to the largest finite f16 from above before rounding
// (kv_quant4.cpp f16_of), so a huge range saturates instead of becoming inf.
KVSCOPE_HD inline uint16_t param_f16(float x) { return f32_to_f16_bits(x > kF16Max ? kF16Max : x); }
KVSCOPE_HD inline float param_value(float x) { return f16_bits_to_f32(param_f16(x)); }

KVSCOPE_HD inline void put_f16(uint8_t* p, uint16_t h) {
  p[0] = static_cast<uint8_t>(h & 0xFFu);
  p[1] = static_cast<uint8_t>(h >> 8);
}
KVSCOPE_HD inline float get_f16(const uint8_t* p) {
  return f16_bits_to_f32(static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8)));
}

// ---- rounding ---------------------------------------------------------------------------------

// The CPU rounds with static_cast<int32_t>(std::lround(v)): half away from zero; a NaN or a value
// outside long's range makes x86-64's lround return LONG_MIN, whose low 32 bits are 0 -- code 0
// before the clamp. Mirrored so that even broken inputs encode identically.
KVSCOPE_HD inline int32_t round_clamp(float v, int32_t lo, int32_t hi) {
  int32_t r = 0;
#if defined(__CUDA_ARCH__)
  const float a = roundf(v);
#else
  const float a = std::round(v);
#endif
  if (a == a && a > -9.2233720368547758e18f && a < 9.2233720368547758e18f) {
    // |a| < 2^63: the CPU's long result truncated to int32 (two's complement, as the cast does)
    r = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(static_cast<int64_t>(a))));
  }
  return r < lo ? lo : (r > hi ? hi : r);
}

// ---- bit packing ------------------------------------------------------------------------------

KVSCOPE_HD inline uint32_t get_code(const uint8_t* codes, int32_t i, int32_t bits) {
  const int32_t bit = i * bits;
  return (static_cast<uint32_t>(codes[bit >> 3]) >> (bit & 7)) & ((1u << bits) - 1u);
}
KVSCOPE_HD inline void or_code(uint8_t* codes, int32_t i, int32_t bits, uint32_t c) {
  const int32_t bit = i * bits;
  codes[bit >> 3] = static_cast<uint8_t>(codes[bit >> 3] | (c << (bit & 7)));
}

// ---- codes ------------------------------------------------------------------------------------

// int4: scale of a group whose largest |x| is amax (the stored, f16-rounded value).
KVSCOPE_HD inline float int4_scale(float amax) { return param_value(amax / static_cast<float>(kInt4Max)); }
KVSCOPE_HD inline uint32_t int4_code(float x, float s) {
  const int32_t q = s > 0.0f ? round_clamp(x / s, -kInt4Max, kInt4Max) : 0;
  return static_cast<uint32_t>(q + 8);
}
KVSCOPE_HD inline float int4_value(uint32_t code, float s) {
  return static_cast<float>(static_cast<int32_t>(code) - 8) * s;
}

// Asymmetric: (scale, min) of values lo..hi on `levels` steps, as stored (f16-rounded).
KVSCOPE_HD inline void asym_params(float lo, float hi, int32_t levels, float* scale, float* mn) {
  *mn = param_value(lo);
  *scale = param_value((hi - *mn) / static_cast<float>(levels));
}
KVSCOPE_HD inline uint32_t asym_code(float x, float s, float mn, int32_t levels) {
  return static_cast<uint32_t>(s > 0.0f ? round_clamp((x - mn) / s, 0, levels) : 0);
}
KVSCOPE_HD inline float asym_value(uint32_t code, float s, float mn) {
#if defined(__CUDA_ARCH__)
  return fmaf(static_cast<float>(code), s, mn);
#else
  return std::fma(static_cast<float>(code), s, mn);
#endif
}

KVSCOPE_HD inline float fmax_(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#else
  return std::fmax(a, b);
#endif
}
KVSCOPE_HD inline float fmin_(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fminf(a, b);
#else
  return std::fmin(a, b);
#endif
}

// ---- rot4's rotation: R = H D / sqrt(d) ----------------------------------------------------------

KVSCOPE_HD inline float rotation_sign(int32_t i) {  // splitmix64 of the index, as kv_quant4.cpp
  uint64_t z = static_cast<uint64_t>(static_cast<int64_t>(i)) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((z ^ (z >> 31)) & 1u) ? -1.0f : 1.0f;
}
KVSCOPE_HD inline float rotation_norm(int32_t d) {
#if defined(__CUDA_ARCH__)
  return 1.0f / sqrtf(static_cast<float>(d));  // IEEE sqrt and division (no fast math)
#else
  return 1.0f / std::sqrt(static_cast<float>(d));
#endif
}
// One butterfly of the in-place fast Walsh-Hadamard transform: stage `len`, pair k (0..d/2).
// Stages run len = 1, 2, 4, ... in order; within a stage pairs are independent (a kernel runs
// them in parallel between barriers and gets the CPU's exact sums).
KVSCOPE_HD inline void fwht_butterfly(float* x, int32_t len, int32_t k) {
  const int32_t j = (k / len) * 2 * len + k % len;
  const float a = x[j], b = x[j + len];
  x[j] = a + b;
  x[j + len] = a - b;
}
KVSCOPE_HD inline void fwht(float* x, int32_t d) {
  for (int32_t len = 1; len < d; len <<= 1)
    for (int32_t k = 0; k < d / 2; ++k) fwht_butterfly(x, len, k);
}
KVSCOPE_HD inline void rotate(float* x, int32_t d) {
  for (int32_t i = 0; i < d; ++i) x[i] *= rotation_sign(i);
  fwht(x, d);
  const float s = rotation_norm(d);
  for (int32_t i = 0; i < d; ++i) x[i] *= s;
}
KVSCOPE_HD inline void unrotate(float* x, int32_t d) {
  fwht(x, d);
  const float s = rotation_norm(d);
  for (int32_t i = 0; i < d; ++i) x[i] *= s * rotation_sign(i);
}

// ---- whole rows (serial: one thread per row on the device) ----------------------------------------

// x(i) -> element i of the row (a pointer's [] or a device accessor that decodes f16 on the fly).
template <typename X>
KVSCOPE_HD inline void encode_int4_row_of(X x, int32_t d, int32_t g, uint8_t* row) {
  uint8_t* scales = row + d / 2;
  for (int32_t i = 0; i < d / 2; ++i) row[i] = 0;
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    float amax = 0.0f;
    for (int32_t i = g0; i < g0 + g; ++i) amax = fmax_(amax, fabsf(x(i)));
    const uint16_t sh = param_f16(amax / static_cast<float>(kInt4Max));
    const float s = f16_bits_to_f32(sh);
    put_f16(scales + 2 * (g0 / g), sh);
    for (int32_t i = g0; i < g0 + g; ++i) or_code(row, i, 4, int4_code(x(i), s));
  }
}
KVSCOPE_HD inline void encode_int4_row(const float* x, int32_t d, int32_t g, uint8_t* row) {
  encode_int4_row_of([x](int32_t i) { return x[i]; }, d, g, row);
}
KVSCOPE_HD inline float int4_row_value(const uint8_t* row, int32_t d, int32_t g, int32_t i) {
  return int4_value(get_code(row, i, 4), get_f16(row + d / 2 + 2 * (i / g)));
}

template <typename X>
KVSCOPE_HD inline void encode_asym_row_of(X x, int32_t d, int32_t g, int32_t bits, uint8_t* row) {
  const int32_t code_bytes = d * bits / 8, levels = (1 << bits) - 1;
  uint8_t* params = row + code_bytes;
  for (int32_t i = 0; i < code_bytes; ++i) row[i] = 0;
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    float lo = x(g0), hi = x(g0);
    for (int32_t i = g0; i < g0 + g; ++i) lo = fmin_(lo, x(i)), hi = fmax_(hi, x(i));
    float s, mn;
    asym_params(lo, hi, levels, &s, &mn);
    put_f16(params + 4 * (g0 / g), param_f16(s));  // s, mn are f16 values: re-encoding is exact
    put_f16(params + 4 * (g0 / g) + 2, param_f16(mn));
    for (int32_t i = g0; i < g0 + g; ++i) or_code(row, i, bits, asym_code(x(i), s, mn, levels));
  }
}
KVSCOPE_HD inline void encode_asym_row(const float* x, int32_t d, int32_t g, int32_t bits, uint8_t* row) {
  encode_asym_row_of([x](int32_t i) { return x[i]; }, d, g, bits, row);
}
KVSCOPE_HD inline float asym_row_value(const uint8_t* row, int32_t d, int32_t g, int32_t bits, int32_t i) {
  const uint8_t* p = row + d * bits / 8 + 4 * (i / g);
  return asym_value(get_code(row, i, bits), get_f16(p), get_f16(p + 2));
}

// KIVI keys, channel c of an n-row tile whose elements are v(r, c) (any accessor): the channel's
// parameters, as encode_channel_tile computes them (a device thread per channel calls this).
template <typename V>
KVSCOPE_HD inline void channel_params(V v, int32_t n, int32_t c, int32_t levels, float* s, float* mn) {
  float lo = v(0, c), hi = v(0, c);
  for (int32_t r = 0; r < n; ++r) lo = fmin_(lo, v(r, c)), hi = fmax_(hi, v(r, c));
  asym_params(lo, hi, levels, s, mn);
}
// Byte j of row r of a KIVI key tile's codes: the 8/bits channels it packs (no read-modify-write,
// so device threads can write bytes independently).
template <typename V>
KVSCOPE_HD inline uint8_t channel_code_byte(V v, int32_t r, int32_t j, int32_t bits, const float* s, const float* mn) {
  const int32_t per = 8 / bits, levels = (1 << bits) - 1;
  uint32_t b = 0;
  for (int32_t k = 0; k < per; ++k) {
    const int32_t c = j * per + k;
    b |= asym_code(v(r, c), s[c], mn[c], levels) << (k * bits);
  }
  return static_cast<uint8_t>(b);
}
// Element c of row r of a completed KIVI key tile (codes at codes + r * code_stride, params after).
KVSCOPE_HD inline float channel_value(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t bits,
                                      int32_t r, int32_t c) {
  return asym_value(get_code(codes + r * code_stride, c, bits), get_f16(params + 4 * c), get_f16(params + 4 * c + 2));
}
// The whole tile serially (host reference of what the device does in parallel).
KVSCOPE_HD inline void encode_channel_tile(const float* x, int32_t n, int32_t d, int32_t bits, uint8_t* codes,
                                           int64_t code_stride, uint8_t* params) {
  const int32_t levels = (1 << bits) - 1;
  for (int32_t r = 0; r < n; ++r)
    for (int32_t i = 0; i < d * bits / 8; ++i) codes[r * code_stride + i] = 0;
  for (int32_t c = 0; c < d; ++c) {
    float s, mn;
    channel_params([&](int32_t r, int32_t k) { return x[static_cast<int64_t>(r) * d + k]; }, n, c, levels, &s, &mn);
    put_f16(params + 4 * c, param_f16(s));
    put_f16(params + 4 * c + 2, param_f16(mn));
    for (int32_t r = 0; r < n; ++r)
      or_code(codes + r * code_stride, c, bits, asym_code(x[static_cast<int64_t>(r) * d + c], s, mn, levels));
  }
}

// ---- tile addressing and the kernels' per-thread work (cuda_packed.cu) --------------------------

// Geometry of one layer's packed K or V array (kv/kv_dtype.h): (block, kv head) tiles of
// tile_bytes, block_size rows of row_bytes each, then (KIVI keys) d x (f16 scale, f16 min).
struct PackedGeom {
  int32_t n_head_kv = 0, head_dim = 0, block_size = 0, group = 0, bits = 4;
  bool kivi = false, rot = false;
  int64_t row_bytes[2] = {0, 0}, tile_bytes[2] = {0, 0};
};
KVSCOPE_HD inline int64_t tile_offset_bytes(const PackedGeom& g, bool is_value, int32_t block, int32_t head) {
  return (static_cast<int64_t>(block) * g.n_head_kv + head) * g.tile_bytes[is_value];
}
// Element offset of (head, slot) inside one residual slot's K or V part ([kv_head][slot][head_dim]).
KVSCOPE_HD inline int64_t residual_offset(const PackedGeom& g, int32_t head, int32_t slot) {
  return (static_cast<int64_t>(head) * g.block_size + slot) * g.head_dim;
}
// Element e of slot `slot` of a stored (not residual) tile, dequantized (rot4: rotated basis).
KVSCOPE_HD inline float tile_value(const PackedGeom& g, const uint8_t* tile, bool is_value, int32_t slot, int32_t e) {
  if (!g.kivi) return int4_row_value(tile + slot * g.row_bytes[is_value], g.head_dim, g.group, e);
  if (!is_value) return channel_value(tile, g.row_bytes[0], tile + g.block_size * g.row_bytes[0], g.bits, slot, e);
  return asym_row_value(tile + slot * g.row_bytes[1], g.head_dim, g.group, g.bits, e);
}
// int4 / rot4: one row into its tile (x is rotated in place for rot4).
KVSCOPE_HD inline void store_int4_row(const PackedGeom& g, float* x, uint8_t* tile, bool is_value, int32_t slot) {
  if (g.rot) rotate(x, g.head_dim);
  encode_int4_row(x, g.head_dim, g.group, tile + slot * g.row_bytes[is_value]);
}
// KIVI block completion from the block's f16 residual rows res[block_size][head_dim]:
// keys, channel c's parameters (stored, and returned for the code bytes) ...
KVSCOPE_HD inline void complete_key_channel(const PackedGeom& g, const uint16_t* res, uint8_t* tile, int32_t c,
                                            float* s, float* mn) {
  const int32_t D = g.head_dim;
  auto val = [res, D](int32_t r, int32_t k) { return f16_bits_to_f32(res[static_cast<int64_t>(r) * D + k]); };
  channel_params(val, g.block_size, c, (1 << g.bits) - 1, s, mn);
  uint8_t* params = tile + g.block_size * g.row_bytes[0];
  put_f16(params + 4 * c, param_f16(*s));
  put_f16(params + 4 * c + 2, param_f16(*mn));
}
// ... then code byte idx (row idx / code_bytes, byte idx % code_bytes) from all channels' s, mn;
KVSCOPE_HD inline void complete_key_byte(const PackedGeom& g, const uint16_t* res, uint8_t* tile, int32_t idx,
                                         const float* s, const float* mn) {
  const int32_t D = g.head_dim, code_bytes = D * g.bits / 8;
  auto val = [res, D](int32_t r, int32_t k) { return f16_bits_to_f32(res[static_cast<int64_t>(r) * D + k]); };
  const int32_t row = idx / code_bytes, j = idx % code_bytes;
  tile[row * g.row_bytes[0] + j] = channel_code_byte(val, row, j, g.bits, s, mn);
}
// values: row `row`, per token.
KVSCOPE_HD inline void complete_value_row(const PackedGeom& g, const uint16_t* res, uint8_t* tile, int32_t row) {
  const uint16_t* rr = res + static_cast<int64_t>(row) * g.head_dim;
  encode_asym_row_of([rr](int32_t i) { return f16_bits_to_f32(rr[i]); }, g.head_dim, g.group, g.bits,
                     tile + row * g.row_bytes[1]);
}

}  // namespace kvscope::kvq4math
