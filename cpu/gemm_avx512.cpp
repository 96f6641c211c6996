// AVX-512 VNNI micro-kernels: 8 weight rows x 16 (zmm) or 8 (ymm) tokens per tile (tokens in the lanes, see
// gemm_kernels.h). Every function carries its own target attribute instead of the file being
// built with -mavx512*, so a portable build contains these kernels and gemm.cpp calls them only
// when the CPU reports the features; nothing here is inline code shared with other files.
#include <cstring>

#include "cpu/gemm_kernels.h"

#if defined(__x86_64__)
#include "cpu/x86_intrinsics.h"

#define KVSCOPE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

namespace kvscope::gemm_detail {

namespace {

constexpr int NR = kRowsAvx512;

// The same kernels on 16 lanes (zmm) or 8 lanes (ymm, AVX512-VL): a call with <= 8 tokens
// would waste half of every zmm instruction.
struct Zmm {
  using vi = __m512i;
  using vf = __m512;
  static constexpr int L = 16;
  KVSCOPE_AVX512 static vi zero() { return _mm512_setzero_si512(); }
  KVSCOPE_AVX512 static vf zerof() { return _mm512_setzero_ps(); }
  KVSCOPE_AVX512 static vi set1(int32_t v) { return _mm512_set1_epi32(v); }
  KVSCOPE_AVX512 static vf set1f(float v) { return _mm512_set1_ps(v); }
  KVSCOPE_AVX512 static vi load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  KVSCOPE_AVX512 static vf loadf(const uint8_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
  KVSCOPE_AVX512 static vi dpbusd(vi acc, vi u, vi s) { return _mm512_dpbusd_epi32(acc, u, s); }
  KVSCOPE_AVX512 static vi dpwssd(vi acc, vi a, vi b) { return _mm512_dpwssd_epi32(acc, a, b); }
  KVSCOPE_AVX512 static vi add(vi a, vi b) { return _mm512_add_epi32(a, b); }
  KVSCOPE_AVX512 static vi sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
  KVSCOPE_AVX512 static vi mullo(vi a, vi b) { return _mm512_mullo_epi32(a, b); }
  KVSCOPE_AVX512 static vi sll(vi a, __m128i n) { return _mm512_sll_epi32(a, n); }
  KVSCOPE_AVX512 static vf cvt(vi a) { return _mm512_cvtepi32_ps(a); }
  KVSCOPE_AVX512 static vf addf(vf a, vf b) { return _mm512_add_ps(a, b); }
  KVSCOPE_AVX512 static vf mulf(vf a, vf b) { return _mm512_mul_ps(a, b); }
  KVSCOPE_AVX512 static vf fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
  KVSCOPE_AVX512 static vf fmsub(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }
  // acc lane t -> y[t * ldy] for the first n_tok lanes.
  KVSCOPE_AVX512 static void scatter(float* y, int n_tok, int64_t ldy, vf acc) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(static_cast<int>(ldy)));
    _mm512_mask_i32scatter_ps(y, static_cast<__mmask16>((1u << n_tok) - 1), idx, acc, 4);
  }
};

struct Ymm {
  using vi = __m256i;
  using vf = __m256;
  static constexpr int L = 8;
  KVSCOPE_AVX512 static vi zero() { return _mm256_setzero_si256(); }
  KVSCOPE_AVX512 static vf zerof() { return _mm256_setzero_ps(); }
  KVSCOPE_AVX512 static vi set1(int32_t v) { return _mm256_set1_epi32(v); }
  KVSCOPE_AVX512 static vf set1f(float v) { return _mm256_set1_ps(v); }
  KVSCOPE_AVX512 static vi load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  KVSCOPE_AVX512 static vf loadf(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  KVSCOPE_AVX512 static vi dpbusd(vi acc, vi u, vi s) { return _mm256_dpbusd_epi32(acc, u, s); }
  KVSCOPE_AVX512 static vi dpwssd(vi acc, vi a, vi b) { return _mm256_dpwssd_epi32(acc, a, b); }
  KVSCOPE_AVX512 static vi add(vi a, vi b) { return _mm256_add_epi32(a, b); }
  KVSCOPE_AVX512 static vi sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
  KVSCOPE_AVX512 static vi mullo(vi a, vi b) { return _mm256_mullo_epi32(a, b); }
  KVSCOPE_AVX512 static vi sll(vi a, __m128i n) { return _mm256_sll_epi32(a, n); }
  KVSCOPE_AVX512 static vf cvt(vi a) { return _mm256_cvtepi32_ps(a); }
  KVSCOPE_AVX512 static vf addf(vf a, vf b) { return _mm256_add_ps(a, b); }
  KVSCOPE_AVX512 static vf mulf(vf a, vf b) { return _mm256_mul_ps(a, b); }
  KVSCOPE_AVX512 static vf fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
  KVSCOPE_AVX512 static vf fmsub(vf a, vf b, vf c) { return _mm256_fmsub_ps(a, b, c); }
  KVSCOPE_AVX512 static void scatter(float* y, int n_tok, int64_t ldy, vf acc) {
    const __m256i idx =
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(ldy)));
    _mm256_mask_i32scatter_ps(y, static_cast<__mmask8>((1u << n_tok) - 1), idx, acc, 4);
  }
};

template <typename V>
KVSCOPE_AVX512 inline typename V::vi bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return V::set1(v);
}

// Q8_0 / Q4_0 / Q5_0 against Q8_0 activations: per block, sum((level + 2^shift) * x) by
// vpdpbusd, minus 2^shift * sum(x), then acc = fma(float(sumi), dw * dx, acc) as the scalar kernel.
template <typename V>
KVSCOPE_AVX512 void tile_q8_0_family(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                                     int64_t ldy) {
  constexpr int L = V::L;
  const size_t BB = q8_0_block_bytes(L);
  const __m128i shift = _mm_cvtsi32_si128(w.offset_shift);
  const int64_t k = w.k;
  typename V::vf acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = V::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * 32;
    typename V::vi s[NR];
    for (int r = 0; r < NR; ++r) s[r] = V::zero();
    for (int c = 0; c < 8; ++c) {
      const typename V::vi xv = V::load(pb + c * 4 * L);
      for (int r = 0; r < NR; ++r) s[r] = V::dpbusd(s[r], bcast4<V>(lv + r * k + 4 * c), xv);
    }
    const typename V::vf dx = V::loadf(pb + 32 * L);
    const typename V::vi corr = V::sll(V::load(pb + 36 * L), shift);
    for (int r = 0; r < NR; ++r) {
      const typename V::vf scale = V::mulf(V::set1f(w.d[r * nb + b]), dx);
      acc[r] = V::fmadd(V::cvt(V::sub(s[r], corr)), scale, acc[r]);
    }
  }
  for (int r = 0; r < n_rows; ++r) V::scatter(y + r, n_tok, ldy, acc[r]);
}

// Q4_K: sum_q = sum_j sc_j * sum(q * x) over 8 sub-blocks of 32, sum_m = sum_j m_j * bs32_j
// (vpdpwssd on int16 pairs), acc += fma(d * dx, sum_q, -(dmin * dx * sum_m)).
template <typename V>
KVSCOPE_AVX512 void tile_q4_k(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                              int64_t ldy) {
  constexpr int L = V::L;
  const size_t BB = q8_k_block_bytes(L);
  const int64_t k = w.k;
  typename V::vf acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = V::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * QK_K;
    typename V::vi q[NR];
    for (int r = 0; r < NR; ++r) q[r] = V::zero();
    for (int j = 0; j < 8; ++j) {
      typename V::vi s[NR];
      for (int r = 0; r < NR; ++r) s[r] = V::zero();
      for (int c = 0; c < 8; ++c) {
        const typename V::vi xv = V::load(pb + (j * 8 + c) * 4 * L);
        for (int r = 0; r < NR; ++r) s[r] = V::dpbusd(s[r], bcast4<V>(lv + r * k + 32 * j + 4 * c), xv);
      }
      for (int r = 0; r < NR; ++r) q[r] = V::add(q[r], V::mullo(s[r], V::set1(w.sc[(r * nb + b) * 8 + j])));
    }
    typename V::vi m[NR];
    for (int r = 0; r < NR; ++r) m[r] = V::zero();
    for (int pp = 0; pp < 4; ++pp) {
      const typename V::vi bv = V::load(pb + 260 * L + pp * 4 * L);
      for (int r = 0; r < NR; ++r) m[r] = V::dpwssd(m[r], V::set1(w.pairs[(r * nb + b) * 4 + pp]), bv);
    }
    const typename V::vf dx = V::loadf(pb + 256 * L);
    for (int r = 0; r < NR; ++r) {
      const typename V::vf d = V::mulf(V::set1f(w.d[r * nb + b]), dx);
      const typename V::vf dmin = V::mulf(V::set1f(w.dmin[r * nb + b]), dx);
      acc[r] = V::addf(acc[r], V::fmsub(d, V::cvt(q[r]), V::mulf(dmin, V::cvt(m[r]))));
    }
  }
  for (int r = 0; r < n_rows; ++r) V::scatter(y + r, n_tok, ldy, acc[r]);
}

// Q6_K: sumi = sum_s sc_s * sum(q * x) over 16 sub-blocks of 16 - 32 * sum_s sc_s * bsum_s,
// acc = fma(d * dx, sumi, acc).
template <typename V>
KVSCOPE_AVX512 void tile_q6_k(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                              int64_t ldy) {
  constexpr int L = V::L;
  const size_t BB = q8_k_block_bytes(L);
  const int64_t k = w.k;
  const __m128i five = _mm_cvtsi32_si128(5);
  typename V::vf acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = V::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    const uint8_t* lv = w.levels + b * QK_K;
    typename V::vi q[NR];
    for (int r = 0; r < NR; ++r) q[r] = V::zero();
    for (int j = 0; j < 16; ++j) {
      typename V::vi s[NR];
      for (int r = 0; r < NR; ++r) s[r] = V::zero();
      for (int c = 0; c < 4; ++c) {
        const typename V::vi xv = V::load(pb + (j * 4 + c) * 4 * L);
        for (int r = 0; r < NR; ++r) s[r] = V::dpbusd(s[r], bcast4<V>(lv + r * k + 16 * j + 4 * c), xv);
      }
      for (int r = 0; r < NR; ++r) q[r] = V::add(q[r], V::mullo(s[r], V::set1(w.sc[(r * nb + b) * 16 + j])));
    }
    typename V::vi corr[NR];
    for (int r = 0; r < NR; ++r) corr[r] = V::zero();
    for (int pp = 0; pp < 8; ++pp) {
      const typename V::vi bv = V::load(pb + 276 * L + pp * 4 * L);
      for (int r = 0; r < NR; ++r) corr[r] = V::dpwssd(corr[r], V::set1(w.pairs[(r * nb + b) * 8 + pp]), bv);
    }
    const typename V::vf dx = V::loadf(pb + 256 * L);
    for (int r = 0; r < NR; ++r) {
      const typename V::vi sumi = V::sub(q[r], V::sll(corr[r], five));
      acc[r] = V::fmadd(V::mulf(V::set1f(w.d[r * nb + b]), dx), V::cvt(sumi), acc[r]);
    }
  }
  for (int r = 0; r < n_rows; ++r) V::scatter(y + r, n_tok, ldy, acc[r]);
}

template <typename V>
void tile_width(GgmlType type, const RowTile& w, const uint8_t* panel_tile, int64_t n_blocks, int n_rows, int n_tok,
                float* y, int64_t ldy) {
  switch (type) {
    case GgmlType::Q4_K:
      tile_q4_k<V>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
      return;
    case GgmlType::Q6_K:
      tile_q6_k<V>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
      return;
    default:
      tile_q8_0_family<V>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
      return;
  }
}

}  // namespace

void tile_avx512_vnni(GgmlType type, const RowTile& w, const uint8_t* panel_tile, int64_t n_blocks, int lanes,
                      int n_rows, int n_tok, float* y, int64_t ldy) {
  if (lanes == 16)
    tile_width<Zmm>(type, w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
  else
    tile_width<Ymm>(type, w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
}

}  // namespace kvscope::gemm_detail

#else  // not x86-64: gemm_isa_supported() never reports this ISA

namespace kvscope::gemm_detail {
void tile_avx512_vnni(GgmlType, const RowTile&, const uint8_t*, int64_t, int, int, int, float*, int64_t) {}
}  // namespace kvscope::gemm_detail

#endif
