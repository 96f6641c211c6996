// AVX2 micro-kernels: 4 weight rows x 8 tokens per tile (tokens in the lanes, see
// gemm_kernels.h), for x86 CPUs without AVX-512 VNNI. maddubs + madd replace vpdpbusd; the
// signed Q8_0/Q4_0/Q5_0 levels go through the sign trick (|w| x sign(x, w)) so no int16 pair
// can saturate, the unsigned K-quant levels (<= 63) go straight in. Per-function target
// attributes, as in gemm_avx512.cpp.
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
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(s[r]), scale));
    }
  }
  store_tile(acc, n_rows, n_tok, y, ldy);
}

KVSCOPE_AVX2 void tile_q4_k(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                            int64_t ldy) {
  const size_t BB = q8_k_block_bytes(L);
  const int64_t k = w.k;
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * QK_K;
    __m256i q[NR];
    for (int r = 0; r < NR; ++r) q[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      __m256i s[NR];
      for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i xv = load_i(pb + (j * 8 + c) * 32);
        for (int r = 0; r < NR; ++r) s[r] = dot_u(s[r], bcast4(lv + r * k + 32 * j + 4 * c), xv);
      }
      for (int r = 0; r < NR; ++r)
        q[r] = _mm256_add_epi32(q[r], _mm256_mullo_epi32(s[r], _mm256_set1_epi32(w.sc[(r * nb + b) * 8 + j])));
    }
    __m256i m[NR];
    for (int r = 0; r < NR; ++r) m[r] = _mm256_setzero_si256();
    for (int pp = 0; pp < 4; ++pp) {
      const __m256i bv = load_i(pb + 260 * L + pp * 32);
      for (int r = 0; r < NR; ++r)
        m[r] = _mm256_add_epi32(m[r], _mm256_madd_epi16(_mm256_set1_epi32(w.pairs[(r * nb + b) * 4 + pp]), bv));
    }
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

KVSCOPE_AVX2 void tile_q6_k(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                            int64_t ldy) {
  const size_t BB = q8_k_block_bytes(L);
  const int64_t k = w.k;
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * QK_K;
    __m256i q[NR];
    for (int r = 0; r < NR; ++r) q[r] = _mm256_setzero_si256();
    for (int j = 0; j < 16; ++j) {
      __m256i s[NR];
      for (int r = 0; r < NR; ++r) s[r] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        const __m256i xv = load_i(pb + (j * 4 + c) * 32);
        for (int r = 0; r < NR; ++r) s[r] = dot_u(s[r], bcast4(lv + r * k + 16 * j + 4 * c), xv);
      }
      for (int r = 0; r < NR; ++r)
        q[r] = _mm256_add_epi32(q[r], _mm256_mullo_epi32(s[r], _mm256_set1_epi32(w.sc[(r * nb + b) * 16 + j])));
    }
    __m256i corr[NR];
    for (int r = 0; r < NR; ++r) corr[r] = _mm256_setzero_si256();
    for (int pp = 0; pp < 8; ++pp) {
      const __m256i bv = load_i(pb + 276 * L + pp * 32);
      for (int r = 0; r < NR; ++r)
        corr[r] = _mm256_add_epi32(corr[r], _mm256_madd_epi16(_mm256_set1_epi32(w.pairs[(r * nb + b) * 8 + pp]), bv));
    }
    const __m256 dx = load_f(pb + 256 * L);
    for (int r = 0; r < NR; ++r) {
      const __m256i sumi = _mm256_sub_epi32(q[r], _mm256_slli_epi32(corr[r], 5));
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(w.d[r * nb + b]), dx), _mm256_cvtepi32_ps(sumi), acc[r]);
    }
  }
  store_tile(acc, n_rows, n_tok, y, ldy);
}

}  // namespace

void tile_avx2(GgmlType type, const RowTile& w, const uint8_t* panel_tile, int64_t n_blocks, int n_rows, int n_tok,
               float* y, int64_t ldy) {
  switch (type) {
    case GgmlType::Q4_K: tile_q4_k(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy); return;
    case GgmlType::Q6_K: tile_q6_k(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy); return;
    default: tile_q8_0_family(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy); return;
  }
}

}  // namespace kvscope::gemm_detail

#else

namespace kvscope::gemm_detail {
void tile_avx2(GgmlType, const RowTile&, const uint8_t*, int64_t, int, int, float*, int64_t) {}
}  // namespace kvscope::gemm_detail

#endif
