// AVX-512 VNNI GEMV (one token) for Q8_0 / Q4_0 / Q5_0 / IQ4_NL / MXFP4 weights, bit for bit the AVX2/VNNI
// vec-dot of quant_dot_simd.cpp (dot_symmetric_q8_0). That kernel keeps two 8-lane float
// accumulators per row, even blocks in acc0 and odd blocks in acc1, lane i summing
// scale_b * (int32 sum of products 4i..4i+3 of block b), and returns hsum(acc0 + acc1). Here one
// zmm holds blocks (2p, 2p+1) of a row, so its low half is acc0 and its high half acc1 with the
// same per-lane integer sums (exact: the unsigned-offset form of vpdpbusd plus a bias lane from
// the packed activations, see gemv_kernels.h), the same scale products (f16 widened, one f32
// multiply) and the same fma per lane; the tail block and the final reduction are the same ymm
// code. What changes is the work around it: half the vector instructions, the activation side
// unpacked once per call instead of per row, four rows in flight (independent chains), no call
// or switch per row, and software prefetch of the next row group.
//
// Every function carries its own target attribute (no -mavx512* for the file), so a portable
// build contains the kernel and gemv.cpp calls it only when the CPU reports the features.
#include "cpu/gemv_kernels.h"

#include <cstddef>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include "cpu/x86_intrinsics.h"

#define KVSCOPE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace kvscope::gemv_detail {

namespace {

constexpr int kRows = 4;  // rows in flight per pass

KVSCOPE_AVX512 inline float hsum_ps(__m256 v) {  // the same pairing as quant_dot_simd.cpp
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

KVSCOPE_AVX512 inline uint16_t load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

KVSCOPE_AVX512 inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Weight levels + offset as unsigned bytes: one block (ymm) or two adjacent blocks (zmm).
struct Q8_0Levels {
  static constexpr size_t BB = sizeof(BlockQ8_0);
  KVSCOPE_AVX512 static __m256i one(const uint8_t* b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    return _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  KVSCOPE_AVX512 static __m512i two(const uint8_t* b) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + BB + 2));
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                            _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

// Nibbles at byte QS of blocks of BB bytes: elements 0-15 are the low nibbles, 16-31 the high ones.
template <size_t BB_, size_t QS>
struct NibbleLevels {
  static constexpr size_t BB = BB_;
  KVSCOPE_AVX512 static __m256i one(const uint8_t* b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + QS));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
  }
  KVSCOPE_AVX512 static __m512i two(const uint8_t* b) {
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + QS)));
    const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + BB + QS)));
    const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
    // Shift the second copy in each block (16-bit lanes 8-15 and 24-31) down by a nibble.
    const __m512i s = _mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4);
    return _mm512_and_si512(s, _mm512_set1_epi8(0x0F));
  }
};
using Q4_0Levels = NibbleLevels<sizeof(BlockQ4_0), offsetof(BlockQ4_0, qs)>;

// Q5_0: the Q4_0 nibbles plus 16 where the block's qh bit is set (d, qh[4], qs[16]).
struct Q5_0Levels {
  static constexpr size_t BB = sizeof(BlockQ5_0);
  KVSCOPE_AVX512 static __m256i one(const uint8_t* b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
    return _mm256_mask_add_epi8(nib, static_cast<__mmask32>(load_u32(b + 2)), nib, _mm256_set1_epi8(16));
  }
  KVSCOPE_AVX512 static __m512i two(const uint8_t* b) {
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6)));
    const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + BB + 6)));
    const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(a), c, 1);
    const __m512i nib = _mm512_and_si512(_mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4), _mm512_set1_epi8(0x0F));
    const __mmask64 high =
        static_cast<__mmask64>(load_u32(b + 2)) | (static_cast<__mmask64>(load_u32(b + BB + 2)) << 32);
    return _mm512_mask_add_epi8(nib, high, nib, _mm512_set1_epi8(16));
  }
};

// IQ4_NL and MXFP4: nibbles index a 16-level table; + 128 makes the levels unsigned.
template <typename Nibbles, const int8_t* Table>
struct TableLevels {
  static constexpr size_t BB = Nibbles::BB;
  KVSCOPE_AVX512 static __m256i one(const uint8_t* b) {
    const __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Table)));
    return _mm256_xor_si256(_mm256_shuffle_epi8(t, Nibbles::one(b)), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  KVSCOPE_AVX512 static __m512i two(const uint8_t* b) {
    const __m512i t = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(Table)));
    return _mm512_xor_si512(_mm512_shuffle_epi8(t, Nibbles::two(b)), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};
using IQ4_NLLevels = TableLevels<NibbleLevels<sizeof(BlockIQ4_NL), offsetof(BlockIQ4_NL, qs)>, kIq4nlValues>;
using MXFP4Levels = TableLevels<NibbleLevels<sizeof(BlockMXFP4), offsetof(BlockMXFP4, qs)>, kMxfp4Values>;

// MXFP4's block scale is an E8M0 byte; every other type here leads with an f16.
template <typename Lv>
constexpr bool kE8m0Scale = std::is_same_v<Lv, MXFP4Levels>;

// E8M0 byte -> its half as a float, by table: one load per block instead of a compare and shifts
// on the row loop's critical path.
struct E8m0Table {
  float v[256];
  constexpr E8m0Table() : v() {
    for (int e = 0; e < 256; ++e) v[e] = e8m0_to_fp32_half(static_cast<uint8_t>(e));
  }
};
constexpr E8m0Table kE8m0Half;

// Lanes 0-7 = scale of block b, lanes 8-15 = that of block b + 1, as floats, times dx: the
// vec-dot's dw * dx products.
template <typename Lv>
KVSCOPE_AVX512 inline __m512 pair_scales(const uint8_t* b, size_t bb, const float* dx16) {
  if constexpr (kE8m0Scale<Lv>) {
    const __m512 d =
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(kE8m0Half.v[b[0]]), _mm512_set1_ps(kE8m0Half.v[b[bb]]));
    return _mm512_mul_ps(d, _mm512_loadu_ps(dx16));
  }
  const uint32_t h = load_u16(b) | (static_cast<uint32_t>(load_u16(b + bb)) << 16);
  const __m512 d2 = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h))));
  const __m512 d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), d2);
  return _mm512_mul_ps(d, _mm512_loadu_ps(dx16));
}

template <int R, typename Lv>
KVSCOPE_AVX512 inline void rows_pass(const uint8_t* w, size_t row_bytes, const PackedQ8Row& x, float* y,
                                     bool prefetch) {
  constexpr size_t BB = Lv::BB;
  const int64_t nb = x.nb, np = nb / 2;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < np; ++p) {
    const __m512i xq = _mm512_load_si512(x.qs + 64 * p);
    const __m512i bias = _mm512_load_si512(x.bias + 16 * p);
    const float* dx = x.dx + 16 * p;
    for (int r = 0; r < R; ++r) {
      const uint8_t* b = w + r * row_bytes + 2 * p * BB;
      // The next row group, same offset: one line per block pair is enough (a pair is 36-68 bytes).
      if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(b + R * row_bytes), _MM_HINT_T0);
      const __m512i sums = _mm512_dpbusd_epi32(bias, Lv::two(b), xq);
      acc[r] = _mm512_fmadd_ps(pair_scales<Lv>(b, BB, dx), _mm512_cvtepi32_ps(sums), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 lo = _mm512_castps512_ps256(acc[r]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1));
    if (nb % 2) {  // the last block joins acc0, as in the vec-dot
      const int64_t ib = nb - 1;
      const uint8_t* b = w + r * row_bytes + ib * BB;
      const __m256i sums =
          _mm256_dpbusd_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(x.bias + 8 * ib)), Lv::one(b),
                              _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * ib)));
      const float dw = kE8m0Scale<Lv> ? kE8m0Half.v[b[0]] : _cvtsh_ss(load_u16(b));
      const float s = dw * x.dx[16 * np];
      lo = _mm256_fmadd_ps(_mm256_set1_ps(s), _mm256_cvtepi32_ps(sums), lo);
    }
    y[r] = hsum_ps(_mm256_add_ps(lo, hi));
  }
}

template <typename Lv>
KVSCOPE_AVX512 void rows_all(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1, const PackedQ8Row& x,
                             float* y) {
  int64_t r = r0;
  // Prefetch the next group only while it is inside this call's rows.
  for (; r + 2 * kRows <= r1; r += kRows) rows_pass<kRows, Lv>(w + r * row_bytes, row_bytes, x, y + (r - r0), true);
  for (; r + kRows <= r1; r += kRows) rows_pass<kRows, Lv>(w + r * row_bytes, row_bytes, x, y + (r - r0), false);
  for (; r < r1; ++r) rows_pass<1, Lv>(w + r * row_bytes, row_bytes, x, y + (r - r0), false);
}

}  // namespace

KVSCOPE_AVX512 void gemv_q8_family_avx512(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                                          const PackedQ8Row& x, float* y) {
  switch (type) {
    case GgmlType::Q8_0:
      rows_all<Q8_0Levels>(w, row_bytes, r0, r1, x, y);
      return;
    case GgmlType::Q4_0:
      rows_all<Q4_0Levels>(w, row_bytes, r0, r1, x, y);
      return;
    case GgmlType::Q5_0:
      rows_all<Q5_0Levels>(w, row_bytes, r0, r1, x, y);
      return;
    case GgmlType::IQ4_NL:
      rows_all<IQ4_NLLevels>(w, row_bytes, r0, r1, x, y);
      return;
    case GgmlType::MXFP4:
      rows_all<MXFP4Levels>(w, row_bytes, r0, r1, x, y);
      return;
    default:
      return;  // gemv.cpp only sends these five
  }
}

}  // namespace kvscope::gemv_detail

#else

namespace kvscope::gemv_detail {
void gemv_q8_family_avx512(GgmlType, const uint8_t*, size_t, int64_t, int64_t, const PackedQ8Row&, float*) {}
}  // namespace kvscope::gemv_detail

#endif
