// AVX2 micro-kernels: 4 weight rows x 8 tokens per tile (tokens in the lanes, see
// gemm_kernels.h), for x86 CPUs without AVX-512 VNNI. maddubs + madd replace vpdpbusd; the
// signed Q8_0/Q4_0/Q5_0 levels go through the sign trick (|w| x sign(x, w)) so no int16 pair
// can saturate, the unsigned K-quant levels (<= 63) go straight in, and IQ4_XS's signed table
// levels meet the activations' magnitudes (Q8_K's -128 rules out the sign trick on the weight). Per-function target
// attributes, as in gemm_avx512.cpp.
#include <cstddef>
#include <cstring>

#include "cpu/gemm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define KVSCOPE_AVX2 __attribute__((target("avx2,fma")))

namespace kvscope::gemm_detail {

namespace {

constexpr int NR = kRowsAvx2;
constexpr int L = 8;

KVSCOPE_AVX2 inline __m256i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
KVSCOPE_AVX2 inline __m256i load_i(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
KVSCOPE_AVX2 inline __m256 load_f(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
// s += sums of 4 products u8 x s8 (pairs stay below 2 * 128 * 127 for our inputs).
KVSCOPE_AVX2 inline __m256i dot_u(__m256i s, __m256i u, __m256i x) {
  return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
}
KVSCOPE_AVX2 inline __m256i dot_s(__m256i s, __m256i w, __m256i x) {
  return dot_u(s, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

KVSCOPE_AVX2 void store_tile(const __m256* acc, int n_rows, int n_tok, float* y, int64_t ldy) {
  alignas(32) float tmp[L];
  for (int r = 0; r < n_rows; ++r) {
    _mm256_store_ps(tmp, acc[r]);
    for (int t = 0; t < n_tok; ++t) y[t * ldy + r] = tmp[t];
  }
}

KVSCOPE_AVX2 void tile_q8_0_family(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                                   int64_t ldy) {
  const size_t BB = q8_0_block_bytes(L);
  const int64_t k = w.k;
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * 32;
    __m256i s[NR];
    for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      const __m256i xv = load_i(pb + c * 32);
      for (int r = 0; r < NR; ++r) s[r] = dot_s(s[r], bcast4(lv + r * k + 4 * c), xv);
    }
    const __m256 dx = load_f(pb + 32 * L);
    for (int r = 0; r < NR; ++r) {
      const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(w.d[r * nb + b]), dx);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]), scale, acc[r]);
    }
  }
  store_tile(acc, n_rows, n_tok, y, ldy);
}

// Sums of (level * x) over sub-block j (of NSUB per super-block) for every row, in s[]. Levels
// are unsigned and small (K-quants), or signed IQ4 table values: those take the activation's
// magnitude in maddubs' unsigned slot (Q8_K may hold -128; the table's levels are >= -127).
template <int NSUB, bool SIGNED>
KVSCOPE_AVX2 inline void sub_block_sums(const uint8_t* pb, const uint8_t* lv, int64_t k, int j, __m256i s[NR]) {
  constexpr int C = QK_K / NSUB / 4;
  for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
  for (int c = 0; c < C; ++c) {
    const __m256i xv = load_i(pb + (j * C + c) * 32);
    for (int r = 0; r < NR; ++r) {
      const __m256i wv = bcast4(lv + r * k + (QK_K / NSUB) * j + 4 * c);
      s[r] = SIGNED ? dot_u(s[r], _mm256_sign_epi8(xv, xv), _mm256_sign_epi8(wv, xv)) : dot_u(s[r], wv, xv);
    }
  }
}

// sum_p pairs[p] . (activation sums of sub-blocks 2p, 2p+1) per row (int16 pairs, madd):
// NSUB = 8 reads the sums of 32 (panel offset 260 L), NSUB = 16 the sums of 16 (276 L).
template <int NSUB>
KVSCOPE_AVX2 inline void pair_terms(const RowTile& w, const uint8_t* pb, int64_t nb, int64_t b, __m256i out[NR]) {
  const size_t base = NSUB == 8 ? 260 * L : 276 * L;
  for (int r = 0; r < NR; ++r) out[r] = _mm256_setzero_si256();
  for (int pp = 0; pp < NSUB / 2; ++pp) {
    const __m256i bv = load_i(pb + base + pp * 32);
    for (int r = 0; r < NR; ++r)
      out[r] =
          _mm256_add_epi32(out[r], _mm256_madd_epi16(_mm256_set1_epi32(w.pairs[(r * nb + b) * (NSUB / 2) + pp]), bv));
  }
}

// Affine K-quants (Q4_K: NSUB 8, Q2_K: 16), as tile_k_affine in gemm_avx512.cpp.
template <int NSUB>
KVSCOPE_AVX2 void tile_k_affine(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                                int64_t ldy) {
  const size_t BB = q8_k_block_bytes(L);
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    __m256i q[NR], s[NR], m[NR];
    for (int r = 0; r < NR; ++r) q[r] = _mm256_setzero_si256();
    for (int j = 0; j < NSUB; ++j) {
      sub_block_sums<NSUB, false>(pb, w.levels + b * QK_K, w.k, j, s);
      for (int r = 0; r < NR; ++r)
        q[r] = _mm256_add_epi32(q[r], _mm256_mullo_epi32(s[r], _mm256_set1_epi32(w.sc[(r * nb + b) * NSUB + j])));
    }
    pair_terms<NSUB>(w, pb, nb, b, m);
    const __m256 dx = load_f(pb + 256 * L);
    for (int r = 0; r < NR; ++r) {
      const __m256 d = _mm256_mul_ps(_mm256_set1_ps(w.d[r * nb + b]), dx);
      const __m256 dmin = _mm256_mul_ps(_mm256_set1_ps(w.dmin[r * nb + b]), dx);
      const __m256 t = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(q[r]), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m[r])));
      acc[r] = _mm256_add_ps(acc[r], t);
    }
  }
  store_tile(acc, n_rows, n_tok, y, ldy);
}

// Symmetric K-quants (Q6_K, Q3_K: NSUB 16, unsigned levels with offset 2^shift; IQ4_XS: NSUB 8,
// signed levels and zero pairs, so nothing to remove), as tile_k_sym in gemm_avx512.cpp.
template <int NSUB, bool SIGNED>
KVSCOPE_AVX2 void tile_k_sym(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                             int64_t ldy) {
  const size_t BB = q8_k_block_bytes(L);
  const __m128i shift = _mm_cvtsi32_si128(w.offset_shift);
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    __m256i q[NR], s[NR], corr[NR];
    for (int r = 0; r < NR; ++r) q[r] = _mm256_setzero_si256();
    for (int j = 0; j < NSUB; ++j) {
      sub_block_sums<NSUB, SIGNED>(pb, w.levels + b * QK_K, w.k, j, s);
      for (int r = 0; r < NR; ++r)
        q[r] = _mm256_add_epi32(q[r], _mm256_mullo_epi32(s[r], _mm256_set1_epi32(w.sc[(r * nb + b) * NSUB + j])));
    }
    pair_terms<NSUB>(w, pb, nb, b, corr);
    const __m256 dx = load_f(pb + 256 * L);
    for (int r = 0; r < NR; ++r) {
      const __m256i sumi = _mm256_sub_epi32(q[r], _mm256_sll_epi32(corr[r], shift));
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(w.d[r * nb + b]), dx), _mm256_cvtepi32_ps(sumi), acc[r]);
    }
  }
  store_tile(acc, n_rows, n_tok, y, ldy);
}

// ---- unpacking weight rows to one byte per weight (for both ISAs' kernels) ----------------

KVSCOPE_AVX2 inline void store32(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

// 16 packed bytes -> 32 nibbles: low nibbles are elements 0-15, high nibbles 16-31.
KVSCOPE_AVX2 inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

// Byte j = 0xFF where bit j of the word is set (as in quant_dot_simd.cpp).
KVSCOPE_AVX2 inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i pick =
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), pick);
  const __m256i others = _mm256_set1_epi64x(0x7FBFDFEFF7FBFDFE);
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
}

// Q6_K's six-bit levels (0..63), element 128h + 32i + l as the scalar kernel's q1..q4.
KVSCOPE_AVX2 void unpack_q6_k(const uint8_t* src, int64_t nb, uint8_t* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bw = src + b * sizeof(BlockQ6_K);
    uint8_t* o = out + b * QK_K;
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load_i(bw + offsetof(BlockQ6_K, ql) + 64 * h);
      const __m256i ql1 = load_i(bw + offsetof(BlockQ6_K, ql) + 64 * h + 32);
      const __m256i qh = load_i(bw + offsetof(BlockQ6_K, qh) + 32 * h);
      // Element 128h + 32i + l, i = 0..3 (the scalar kernel's q1..q4); the epi16 shifts
      // never carry across bytes once masked.
      store32(o + 128 * h, _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4)));
      store32(o + 128 * h + 32, _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                                _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0C)), 2)));
      store32(o + 128 * h + 64, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                                _mm256_and_si256(qh, _mm256_set1_epi8(0x30))));
      store32(o + 128 * h + 96,
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                              _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(0xC0))), 2)));
    }
  }
}

// Table levels (IQ4's, or MXFP4's) of 32 nibble indices (16 packed bytes); +128 (unsigned)
// unless signed_levels.
KVSCOPE_AVX2 inline __m256i iq4_levels_32(const uint8_t* qs, bool signed_levels, const int8_t* table = kIq4nlValues) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
  const __m256i lv = _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles_32(qs));
  return signed_levels ? lv : _mm256_xor_si256(lv, _mm256_set1_epi8(static_cast<char>(0x80)));
}

// Q2_K levels (0..3) and Q3_K levels + 4 (0..7): element 128h + 32j + l is bits 2j of byte
// 32h + l, and for Q3_K bit 4h + j of hmask[l] is its third bit.
KVSCOPE_AVX2 void unpack_q2_q3(GgmlType type, const uint8_t* src, int64_t nb, uint8_t* out) {
  const bool q3 = type == GgmlType::Q3_K;
  const size_t bb = q3 ? sizeof(BlockQ3_K) : sizeof(BlockQ2_K);
  const size_t qs_off = q3 ? offsetof(BlockQ3_K, qs) : offsetof(BlockQ2_K, qs);
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bw = src + b * bb;
    const __m256i hm = q3 ? load_i(bw + offsetof(BlockQ3_K, hmask)) : _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load_i(bw + qs_off + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one), 2);
        store32(out + b * QK_K + 128 * h + 32 * j, _mm256_or_si256(lo, hi));
      }
    }
  }
}

}  // namespace

KVSCOPE_AVX2 void unpack_levels(GgmlType type, const uint8_t* src, int64_t nb, bool signed_levels, uint8_t* out) {
  switch (type) {
    case GgmlType::Q8_0: {
      const __m256i flip = _mm256_set1_epi8(signed_levels ? 0 : static_cast<char>(0x80));
      for (int64_t b = 0; b < nb; ++b)
        store32(out + 32 * b, _mm256_xor_si256(load_i(src + b * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs)), flip));
      return;
    }
    case GgmlType::Q4_0: {
      const __m256i off = _mm256_set1_epi8(signed_levels ? 8 : 0);
      for (int64_t b = 0; b < nb; ++b)
        store32(out + 32 * b, _mm256_sub_epi8(nibbles_32(src + b * sizeof(BlockQ4_0) + offsetof(BlockQ4_0, qs)), off));
      return;
    }
    case GgmlType::Q5_0: {
      const __m256i off = _mm256_set1_epi8(signed_levels ? 16 : 0);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* bw = src + b * sizeof(BlockQ5_0);
        uint32_t qh;
        std::memcpy(&qh, bw + offsetof(BlockQ5_0, qh), 4);
        const __m256i hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
        store32(out + 32 * b, _mm256_sub_epi8(_mm256_or_si256(nibbles_32(bw + offsetof(BlockQ5_0, qs)), hi), off));
      }
      return;
    }
    case GgmlType::Q4_K: {
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* qs = src + b * sizeof(BlockQ4_K) + offsetof(BlockQ4_K, qs);
        uint8_t* o = out + b * QK_K;
        for (int i = 0; i < 4; ++i) {
          const __m256i q = load_i(qs + 32 * i);
          store32(o + 64 * i, _mm256_and_si256(q, m4));
          store32(o + 64 * i + 32, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        }
      }
      return;
    }
    case GgmlType::Q6_K:
      return unpack_q6_k(src, nb, out);
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
      return unpack_q2_q3(type, src, nb, out);
    case GgmlType::IQ4_NL:
      for (int64_t b = 0; b < nb; ++b)
        store32(out + 32 * b, iq4_levels_32(src + b * sizeof(BlockIQ4_NL) + offsetof(BlockIQ4_NL, qs), signed_levels));
      return;
    case GgmlType::MXFP4:
      for (int64_t b = 0; b < nb; ++b)
        store32(out + 32 * b,
                iq4_levels_32(src + b * sizeof(BlockMXFP4) + offsetof(BlockMXFP4, qs), signed_levels, kMxfp4Values));
      return;
    case GgmlType::IQ4_XS:
      for (int64_t b = 0; b < nb; ++b)
        for (int g = 0; g < 8; ++g)
          store32(out + b * QK_K + 32 * g,
                  iq4_levels_32(src + b * sizeof(BlockIQ4_XS) + offsetof(BlockIQ4_XS, qs) + 16 * g, signed_levels));
      return;
    default:
      return;
  }
}

void tile_avx2(GgmlType type, const RowTile& w, const uint8_t* panel_tile, int64_t n_blocks, int n_rows, int n_tok,
               float* y, int64_t ldy) {
  switch (type) {
    case GgmlType::Q4_K:
      return tile_k_affine<8>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
    case GgmlType::Q2_K:
      return tile_k_affine<16>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
    case GgmlType::Q6_K:
    case GgmlType::Q3_K:
      return tile_k_sym<16, false>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
    case GgmlType::IQ4_XS:
      return tile_k_sym<8, true>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
    default:
      tile_q8_0_family(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
      return;
  }
}

}  // namespace kvscope::gemm_detail

#else

namespace kvscope::gemm_detail {
void tile_avx2(GgmlType, const RowTile&, const uint8_t*, int64_t, int, int, float*, int64_t) {}
void unpack_levels(GgmlType, const uint8_t*, int64_t, bool, uint8_t*) {}
}  // namespace kvscope::gemm_detail

#endif
