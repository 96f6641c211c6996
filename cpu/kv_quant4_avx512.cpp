// AVX-512 forms of the sub-byte KV decoders (cpu/kv_quant4_simd.h): 16 channels per register
// instead of the AVX2 forms' 8, and the nibbles of 4-bit codes split with byte operations (one
// and, one shift, one interleave for 32 codes) instead of a variable shift per 8 codes. The
// arithmetic is the scalar references' (code widened to int32, then float; fma(code, scale,
// min), or (code - 8) * scale for int4), so the results are the same bits. With the AVX2 forms a
// 4-bit decode step at 4K context cost 1.3-1.5x int8's, whose dequantization the compiler
// vectorises with 16 lanes on these CPUs.
#include <cstring>

#include "cpu/kv_quant4_simd.h"
#include "gguf/ggml_types.h"

#if defined(__x86_64__)
#include "cpu/cpu_features.h"
#include "cpu/x86_intrinsics.h"
#define KVSCOPE_AVX512_F16C __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#endif

namespace kvscope::kvq4::avx512 {

#if defined(__x86_64__)

namespace {

KVSCOPE_AVX512_F16C inline float f16_at(const uint8_t* p) {  // exact, as fp16_to_fp32, without the call
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 4-bit codes i..i+31 of a row (i even: element i is the low nibble of byte i/2) as two
// registers of 16 int32 lanes, each lane's low 4 bits the code and the rest garbage (the
// neighbour's bits): 16 bytes, shifted by a nibble for the high codes, interleaved back in
// order. vpermps reads only the low 4 bits of an index, so no mask is needed before a lookup.
KVSCOPE_AVX512_F16C inline void nibble_indices32(const uint8_t* codes, int32_t i, __m512i* a, __m512i* b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i / 2));
  const __m128i hi = _mm_srli_epi16(x, 4);
  *a = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(x, hi));  // codes i .. i+15
  *b = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(x, hi));  // codes i+16 .. i+31
}
KVSCOPE_AVX512_F16C inline __m512i nibble_indices16(const uint8_t* codes, int32_t i) {
  const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2));
  return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(x, _mm_srli_epi16(x, 4)));
}

// The same codes masked to their 4 bits, for arithmetic.
KVSCOPE_AVX512_F16C inline void nibbles32(const uint8_t* codes, int32_t i, __m512i* lo16, __m512i* hi16) {
  const __m512i mask = _mm512_set1_epi32(0x0F);
  nibble_indices32(codes, i, lo16, hi16);
  *lo16 = _mm512_and_si512(*lo16, mask);
  *hi16 = _mm512_and_si512(*hi16, mask);
}
KVSCOPE_AVX512_F16C inline __m512i nibbles16(const uint8_t* codes, int32_t i) {
  return _mm512_and_si512(nibble_indices16(codes, i), _mm512_set1_epi32(0x0F));
}

// Codes i..i+15 of a 2-bit row (i a multiple of 16): one 32-bit word, broadcast, lane k shifted
// right by 2k.
// (crumb_indices16 leaves the next code's bits above: for a lookup in a table of period 4.)
KVSCOPE_AVX512_F16C inline __m512i crumb_indices16(const uint8_t* codes, int32_t i) {
  int32_t word;
  std::memcpy(&word, codes + i / 4, 4);
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return _mm512_srlv_epi32(_mm512_set1_epi32(word), shifts);
}
KVSCOPE_AVX512_F16C inline __m512i crumbs16(const uint8_t* codes, int32_t i) {
  return _mm512_and_si512(crumb_indices16(codes, i), _mm512_set1_epi32(3));
}

// Codes [from, to) of a row (to - from a multiple of 16) looked up in `table`, the 16 values a
// 4-bit code decodes to (for 2 bits the 4 values, four times over): one vpermps per 16 codes
// instead of a convert and an fma. The table is computed with the scalar reference's operation
// per code, so the values are the same bits.
template <int Bits>
KVSCOPE_AVX512_F16C inline void lookup_span(const uint8_t* row, int32_t from, int32_t to, __m512 table, float* y) {
  int32_t c = from;
  if constexpr (Bits == 4) {
    for (; c + 32 <= to; c += 32) {
      __m512i a, b;
      nibble_indices32(row, c, &a, &b);
      _mm512_storeu_ps(y + c, _mm512_permutexvar_ps(a, table));
      _mm512_storeu_ps(y + c + 16, _mm512_permutexvar_ps(b, table));
    }
  }
  for (; c < to; c += 16)
    _mm512_storeu_ps(y + c,
                     _mm512_permutexvar_ps(Bits == 4 ? nibble_indices16(row, c) : crumb_indices16(row, c), table));
}

// The codes 0..15 as floats, and 0..3 four times over.
KVSCOPE_AVX512_F16C inline __m512 code_values(int bits) {
  return bits == 4 ? _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
                   : _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
}

// y[i..i+15] = fma(code, s, mn) for the 16 codes in c.
KVSCOPE_AVX512_F16C inline void fma_store(float* y, __m512i c, __m512 s, __m512 mn) {
  _mm512_storeu_ps(y, _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), s, mn));
}

// A row of d codes with s[c] and mn[c] per channel c (KIVI's keys; d a multiple of 16).
template <int Bits>
KVSCOPE_AVX512_F16C inline void channel_row(const uint8_t* row, int32_t d, const float* s, const float* mn, float* y) {
  int32_t c = 0;
  if constexpr (Bits == 4) {
    for (; c + 32 <= d; c += 32) {
      __m512i a, b;
      nibbles32(row, c, &a, &b);
      fma_store(y + c, a, _mm512_load_ps(s + c), _mm512_load_ps(mn + c));
      fma_store(y + c + 16, b, _mm512_load_ps(s + c + 16), _mm512_load_ps(mn + c + 16));
    }
  }
  for (; c < d; c += 16)
    fma_store(y + c, Bits == 4 ? nibbles16(row, c) : crumbs16(row, c), _mm512_load_ps(s + c), _mm512_load_ps(mn + c));
}

// Per group: table[k] = fma(k, scale, min), the scalar reference's value of code k.
template <int Bits>
KVSCOPE_AVX512_F16C void asym_row(const uint8_t* row, int32_t d, int32_t g, float* y) {
  const uint8_t* params = row + d * Bits / 8;
  const __m512 codes = code_values(Bits);
  for (int32_t g0 = 0; g0 < d; g0 += g) {
    const __m512 s = _mm512_set1_ps(f16_at(params + 4 * (g0 / g))),
                 mn = _mm512_set1_ps(f16_at(params + 4 * (g0 / g) + 2));
    lookup_span<Bits>(row, g0, g0 + g, _mm512_fmadd_ps(codes, s, mn), y);
  }
}

template <int Bits>
KVSCOPE_AVX512_F16C void channel_rows(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n,
                                      int32_t d, float* y) {
  alignas(64) float s[512], mn[512];  // head_dim <= 512 (checked by the storage)
  // (scale, min) f16 pairs, 16 channels per step: the even lanes of the 32 halves are the
  // scales, the odd ones the minimums.
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int32_t c = 0; c < d; c += 16) {
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(params + 4 * c)));
    const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(params + 4 * c + 32)));
    _mm512_store_ps(s + c, _mm512_permutex2var_ps(a, even, b));
    _mm512_store_ps(mn + c, _mm512_permutex2var_ps(a, odd, b));
  }
  for (int32_t r = 0; r < n; ++r) channel_row<Bits>(codes + r * code_stride, d, s, mn, y + static_cast<int64_t>(r) * d);
}

}  // namespace

bool available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return ok;
}

// Per group: table[k] = (k - 8) * scale, the scalar reference's value of code k.
KVSCOPE_AVX512_F16C void decode_int4_row(const uint8_t* row, int32_t d, int32_t g, float* y) {
  const uint8_t* scales = row + d / 2;
  const __m512 centred = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  for (int32_t g0 = 0; g0 < d; g0 += g)
    lookup_span<4>(row, g0, g0 + g, _mm512_mul_ps(centred, _mm512_set1_ps(f16_at(scales + 2 * (g0 / g)))), y);
}

void decode_asym_row(const uint8_t* row, int32_t d, int32_t g, int32_t bits, float* y) {
  bits == 4 ? asym_row<4>(row, d, g, y) : asym_row<2>(row, d, g, y);
}

void decode_channel_rows(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n, int32_t d,
                         int32_t bits, float* y) {
  bits == 4 ? channel_rows<4>(codes, code_stride, params, n, d, y)
            : channel_rows<2>(codes, code_stride, params, n, d, y);
}

KVSCOPE_AVX512_F16C void decode_f16_rows(const uint16_t* h, int32_t n, int32_t d, float* y) {
  const int64_t total = static_cast<int64_t>(n) * d;
  int64_t i = 0;
  for (; i + 16 <= total; i += 16)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
  for (; i < total; ++i) y[i] = fp16_to_fp32(h[i]);
}

// decode_int4_row's values plus m[c] per channel, added before the store (rot4c's keys: the same
// bits as decoding, then adding, without a second pass over the rows).
KVSCOPE_AVX512_F16C void decode_int4_rows_plus(const uint8_t* rows, int64_t stride, int32_t n, int32_t d, int32_t g,
                                               const float* m, float* y) {
  const __m512 centred = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  for (int32_t r = 0; r < n; ++r) {
    const uint8_t* row = rows + r * stride;
    float* yr = y + static_cast<int64_t>(r) * d;
    for (int32_t g0 = 0; g0 < d; g0 += g) {
      const __m512 table = _mm512_mul_ps(centred, _mm512_set1_ps(f16_at(row + d / 2 + 2 * (g0 / g))));
      for (int32_t c = g0; c < g0 + g; c += 16)
        _mm512_storeu_ps(yr + c,
                         _mm512_add_ps(_mm512_permutexvar_ps(nibble_indices16(row, c), table), _mm512_loadu_ps(m + c)));
    }
  }
}

#else

bool available() { return false; }
void decode_int4_row(const uint8_t*, int32_t, int32_t, float*) {}
void decode_asym_row(const uint8_t*, int32_t, int32_t, int32_t, float*) {}
void decode_channel_rows(const uint8_t*, int64_t, const uint8_t*, int32_t, int32_t, int32_t, float*) {}
void decode_f16_rows(const uint16_t*, int32_t, int32_t, float*) {}
void decode_int4_rows_plus(const uint8_t*, int64_t, int32_t, int32_t, int32_t, const float*, float*) {}

#endif

}  // namespace kvscope::kvq4::avx512
