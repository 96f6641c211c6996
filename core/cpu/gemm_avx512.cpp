// AVX-512 VNNI micro-kernels: 8 weight rows x 16 tokens per tile (tokens in the lanes, see
// gemm_kernels.h). Every function carries its own target attribute instead of the file being
// built with -mavx512*, so a portable build contains these kernels and gemm.cpp calls them only
// when the CPU reports the features; nothing here is inline code shared with other files.
#include <cstring>

#include "cpu/gemm_kernels.h"

#if defined(__x86_64__)
// GCC 12 warns about its own _mm512_undefined_* placeholders once inlined (see quant_dot_kernels.h).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#define KVSCOPE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

namespace kvscope::gemm_detail {

namespace {

constexpr int NR = kRowsAvx512;
constexpr int L = 16;

KVSCOPE_AVX512 inline __m512i bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
KVSCOPE_AVX512 inline __m512i load_i(const uint8_t* p) { return _mm512_loadu_si512(p); }
KVSCOPE_AVX512 inline __m512 load_f(const uint8_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }

// acc[r] lane t -> y[t * ldy + r] for the live rows and tokens.
KVSCOPE_AVX512 void store_tile(const __m512* acc, int n_rows, int n_tok, float* y, int64_t ldy) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(ldy)));
  const __mmask16 m = static_cast<__mmask16>((1u << n_tok) - 1);
  for (int r = 0; r < n_rows; ++r) _mm512_mask_i32scatter_ps(y + r, m, idx, acc[r], 4);
}

// Q8_0 / Q4_0 / Q5_0 against Q8_0 activations: per block, sum((level + 2^shift) * x) by
// vpdpbusd, minus 2^shift * sum(x), then acc += float(sumi) * (dw * dx) as the scalar kernel.
KVSCOPE_AVX512 void tile_q8_0_family(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                                     int64_t ldy) {
  const size_t BB = q8_0_block_bytes(L);
  const __m128i shift = _mm_cvtsi32_si128(w.offset_shift);
  const int64_t k = w.k;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * 32;
    __m512i s[NR];
    for (int r = 0; r < NR; ++r) s[r] = _mm512_setzero_si512();
    for (int c = 0; c < 8; ++c) {
      const __m512i xv = load_i(pb + c * 64);
      for (int r = 0; r < NR; ++r) s[r] = _mm512_dpbusd_epi32(s[r], bcast4(lv + r * k + 4 * c), xv);
    }
    const __m512 dx = load_f(pb + 32 * L);
    const __m512i corr = _mm512_sll_epi32(load_i(pb + 36 * L), shift);
    for (int r = 0; r < NR; ++r) {
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(w.d[r * nb + b]), dx);
      acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[r], corr)), scale));
    }
  }
  store_tile(acc, n_rows, n_tok, y, ldy);
}

// Q4_K: sum_q = sum_j sc_j * sum(q * x) over 8 sub-blocks of 32, sum_m = sum_j m_j * bs32_j
// (vpdpwssd on int16 pairs), acc += fma(d * dx, sum_q, -(dmin * dx * sum_m)).
KVSCOPE_AVX512 void tile_q4_k(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                              int64_t ldy) {
  const size_t BB = q8_k_block_bytes(L);
  const int64_t k = w.k;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * QK_K;
    __m512i q[NR];
    for (int r = 0; r < NR; ++r) q[r] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      __m512i s[NR];
      for (int r = 0; r < NR; ++r) s[r] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        const __m512i xv = load_i(pb + (j * 8 + c) * 64);
        for (int r = 0; r < NR; ++r) s[r] = _mm512_dpbusd_epi32(s[r], bcast4(lv + r * k + 32 * j + 4 * c), xv);
      }
      for (int r = 0; r < NR; ++r)
        q[r] = _mm512_add_epi32(q[r], _mm512_mullo_epi32(s[r], _mm512_set1_epi32(w.sc[(r * nb + b) * 8 + j])));
    }
    __m512i m[NR];
    for (int r = 0; r < NR; ++r) m[r] = _mm512_setzero_si512();
    for (int pp = 0; pp < 4; ++pp) {
      const __m512i bv = load_i(pb + 260 * L + pp * 64);
      for (int r = 0; r < NR; ++r) m[r] = _mm512_dpwssd_epi32(m[r], _mm512_set1_epi32(w.pairs[(r * nb + b) * 4 + pp]), bv);
    }
    const __m512 dx = load_f(pb + 256 * L);
    for (int r = 0; r < NR; ++r) {
      const __m512 d = _mm512_mul_ps(_mm512_set1_ps(w.d[r * nb + b]), dx);
      const __m512 dmin = _mm512_mul_ps(_mm512_set1_ps(w.dmin[r * nb + b]), dx);
      const __m512 t = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(q[r]), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m[r])));
      acc[r] = _mm512_add_ps(acc[r], t);
    }
  }
  store_tile(acc, n_rows, n_tok, y, ldy);
}

// Q6_K: sumi = sum_s sc_s * sum(q * x) over 16 sub-blocks of 16 - 32 * sum_s sc_s * bsum_s,
// acc = fma(d * dx, sumi, acc).
KVSCOPE_AVX512 void tile_q6_k(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                              int64_t ldy) {
  const size_t BB = q8_k_block_bytes(L);
  const int64_t k = w.k;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * QK_K;
    __m512i q[NR];
    for (int r = 0; r < NR; ++r) q[r] = _mm512_setzero_si512();
    for (int j = 0; j < 16; ++j) {
      __m512i s[NR];
      for (int r = 0; r < NR; ++r) s[r] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i xv = load_i(pb + (j * 4 + c) * 64);
        for (int r = 0; r < NR; ++r) s[r] = _mm512_dpbusd_epi32(s[r], bcast4(lv + r * k + 16 * j + 4 * c), xv);
      }
      for (int r = 0; r < NR; ++r)
        q[r] = _mm512_add_epi32(q[r], _mm512_mullo_epi32(s[r], _mm512_set1_epi32(w.sc[(r * nb + b) * 16 + j])));
    }
    __m512i corr[NR];
    for (int r = 0; r < NR; ++r) corr[r] = _mm512_setzero_si512();
    for (int pp = 0; pp < 8; ++pp) {
      const __m512i bv = load_i(pb + 276 * L + pp * 64);
      for (int r = 0; r < NR; ++r)
        corr[r] = _mm512_dpwssd_epi32(corr[r], _mm512_set1_epi32(w.pairs[(r * nb + b) * 8 + pp]), bv);
    }
    const __m512 dx = load_f(pb + 256 * L);
    for (int r = 0; r < NR; ++r) {
      const __m512i sumi = _mm512_sub_epi32(q[r], _mm512_slli_epi32(corr[r], 5));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(w.d[r * nb + b]), dx), _mm512_cvtepi32_ps(sumi), acc[r]);
    }
  }
  store_tile(acc, n_rows, n_tok, y, ldy);
}

}  // namespace

void tile_avx512_vnni(GgmlType type, const RowTile& w, const uint8_t* panel_tile, int64_t n_blocks, int n_rows,
                      int n_tok, float* y, int64_t ldy) {
  switch (type) {
    case GgmlType::Q4_K: tile_q4_k(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy); return;
    case GgmlType::Q6_K: tile_q6_k(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy); return;
    default: tile_q8_0_family(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy); return;
  }
}

}  // namespace kvscope::gemm_detail

#else  // not x86-64: gemm_isa_supported() never reports this ISA

namespace kvscope::gemm_detail {
void tile_avx512_vnni(GgmlType, const RowTile&, const uint8_t*, int64_t, int, int, float*, int64_t) {}
}  // namespace kvscope::gemm_detail

#endif
