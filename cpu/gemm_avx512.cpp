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

// Sums of (level * x) over sub-block j of the block at pb / lv, for every row, in s[]: NSUB
// sub-blocks of QK_K / NSUB levels (the panel holds 4 activation bytes of each token per dword).
template <typename V, int NSUB>
KVSCOPE_AVX512 inline void sub_block_sums(const uint8_t* pb, const uint8_t* lv, int64_t k, int j,
                                          typename V::vi s[NR]) {
  constexpr int L = V::L, C = QK_K / NSUB / 4;
  for (int r = 0; r < NR; ++r) s[r] = V::zero();
  for (int c = 0; c < C; ++c) {
    const typename V::vi xv = V::load(pb + (j * C + c) * 4 * L);
    for (int r = 0; r < NR; ++r) s[r] = V::dpbusd(s[r], bcast4<V>(lv + r * k + (QK_K / NSUB) * j + 4 * c), xv);
  }
}

// sum_p pairs[p] . (activation sums of sub-blocks 2p, 2p+1) per row, by vpdpwssd on int16
// pairs: NSUB = 8 reads the sums of 32 (panel offset 260 L), NSUB = 16 the sums of 16 (276 L).
template <typename V, int NSUB>
KVSCOPE_AVX512 inline void pair_terms(const RowTile& w, const uint8_t* pb, int64_t nb, int64_t b,
                                      typename V::vi out[NR]) {
  constexpr int L = V::L;
  const size_t base = NSUB == 8 ? 260 * L : 276 * L;
  for (int r = 0; r < NR; ++r) out[r] = V::zero();
  for (int pp = 0; pp < NSUB / 2; ++pp) {
    const typename V::vi bv = V::load(pb + base + pp * 4 * L);
    for (int r = 0; r < NR; ++r) out[r] = V::dpwssd(out[r], V::set1(w.pairs[(r * nb + b) * (NSUB / 2) + pp]), bv);
  }
}

// Affine K-quants, value = d * sc * q - dmin * m (Q4_K: 8 sub-blocks of 32, Q2_K: 16 of 16):
// sum_q = sum_j sc_j * sum(q * x), sum_m = sum_j m_j * bsum_j, acc += fma(d dx, sum_q, -dmin dx sum_m).
template <typename V, int NSUB>
KVSCOPE_AVX512 void tile_k_affine(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                                  int64_t ldy) {
  const size_t BB = q8_k_block_bytes(V::L);
  typename V::vf acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = V::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    typename V::vi q[NR], s[NR], m[NR];
    for (int r = 0; r < NR; ++r) q[r] = V::zero();
    for (int j = 0; j < NSUB; ++j) {
      sub_block_sums<V, NSUB>(pb, w.levels + b * QK_K, w.k, j, s);
      for (int r = 0; r < NR; ++r) q[r] = V::add(q[r], V::mullo(s[r], V::set1(w.sc[(r * nb + b) * NSUB + j])));
    }
    pair_terms<V, NSUB>(w, pb, nb, b, m);
    const typename V::vf dx = V::loadf(pb + 256 * V::L);
    for (int r = 0; r < NR; ++r) {
      const typename V::vf d = V::mulf(V::set1f(w.d[r * nb + b]), dx);
      const typename V::vf dmin = V::mulf(V::set1f(w.dmin[r * nb + b]), dx);
      acc[r] = V::addf(acc[r], V::fmsub(d, V::cvt(q[r]), V::mulf(dmin, V::cvt(m[r]))));
    }
  }
  for (int r = 0; r < n_rows; ++r) V::scatter(y + r, n_tok, ldy, acc[r]);
}

// Symmetric K-quants, value = d * sc * (u - 2^shift) with unsigned stored levels u (Q6_K: 16
// sub-blocks, offset 32; Q3_K: 16, offset 4; IQ4_XS: 8 sub-blocks of 32, table level + 128):
// sumi = sum_j sc_j * sum(u * x) - 2^shift * sum_j sc_j * bsum_j, acc = fma(d dx, sumi, acc).
template <typename V, int NSUB>
KVSCOPE_AVX512 void tile_k_sym(const RowTile& w, const uint8_t* p, int64_t nb, int n_rows, int n_tok, float* y,
                               int64_t ldy) {
  const size_t BB = q8_k_block_bytes(V::L);
  const __m128i shift = _mm_cvtsi32_si128(w.offset_shift);
  typename V::vf acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = V::zerof();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = p + b * BB;
    typename V::vi q[NR], s[NR], corr[NR];
    for (int r = 0; r < NR; ++r) q[r] = V::zero();
    for (int j = 0; j < NSUB; ++j) {
      sub_block_sums<V, NSUB>(pb, w.levels + b * QK_K, w.k, j, s);
      for (int r = 0; r < NR; ++r) q[r] = V::add(q[r], V::mullo(s[r], V::set1(w.sc[(r * nb + b) * NSUB + j])));
    }
    pair_terms<V, NSUB>(w, pb, nb, b, corr);
    const typename V::vf dx = V::loadf(pb + 256 * V::L);
    for (int r = 0; r < NR; ++r) {
      const typename V::vi sumi = V::sub(q[r], V::sll(corr[r], shift));
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
      return tile_k_affine<V, 8>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
    case GgmlType::Q2_K:
      return tile_k_affine<V, 16>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
    case GgmlType::Q6_K:
    case GgmlType::Q3_K:
      return tile_k_sym<V, 16>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
    case GgmlType::IQ4_XS:
      return tile_k_sym<V, 8>(w, panel_tile, n_blocks, n_rows, n_tok, y, ldy);
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
