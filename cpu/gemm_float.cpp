#include "cpu/gemm_float.h"

#include <cstring>
#include <stdexcept>
#include <vector>

#include "cpu/thread_pool.h"
#include "gguf/ggml_types.h"

#if defined(__x86_64__)
#include "cpu/x86_intrinsics.h"
#define KVSCOPE_AVX2_FMA_F16C __attribute__((target("avx2,fma,f16c")))
#endif

namespace kvscope {

namespace {

constexpr int kRows = 4;
constexpr int kLanes = 16;

#if defined(__x86_64__)
// One tile: kRows rows (wt, row-major, stride k) x kLanes tokens (panel [k][kLanes]).
KVSCOPE_AVX2_FMA_F16C void tile(const float* wt, const float* panel, int64_t k, int n_rows, int n_tok, float* y,
                                int64_t ldy) {
  __m256 acc[kRows][2];
  for (auto& r : acc) r[0] = r[1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; ++i) {
    const __m256 p0 = _mm256_load_ps(panel + i * kLanes);
    const __m256 p1 = _mm256_load_ps(panel + i * kLanes + 8);
    for (int r = 0; r < kRows; ++r) {
      const __m256 b = _mm256_broadcast_ss(wt + r * k + i);
      acc[r][0] = _mm256_fmadd_ps(b, p0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(b, p1, acc[r][1]);
    }
  }
  alignas(32) float out[kLanes];
  for (int r = 0; r < n_rows; ++r) {
    _mm256_store_ps(out, acc[r][0]);
    _mm256_store_ps(out + 8, acc[r][1]);
    for (int t = 0; t < n_tok; ++t) y[t * ldy + r] = out[t];
  }
}
#endif

float* aligned(std::vector<float>& v, size_t n) {
  v.resize(n + 8);
  auto* p = v.data();
  return p + ((32 - reinterpret_cast<uintptr_t>(p) % 32) % 32) / sizeof(float);
}

}  // namespace

bool gemm_float_handles(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

void gemm_float(const TensorView& w, const uint8_t* xc, size_t x_row_bytes, int64_t n_tokens, float* y,
                ThreadPool& pool) {
#if defined(__x86_64__)
  const GgmlType type = w.type();
  if (!gemm_float_handles(type)) throw std::invalid_argument("gemm_float: not a float weight type");
  if (n_tokens <= 0) return;
  const int64_t k = w.ne(0), n_out = w.rows();
  const int64_t n_tiles = (n_tokens + kLanes - 1) / kLanes;
  const size_t tile_floats = static_cast<size_t>(k) * kLanes;

  // Panel (the caller's thread owns it, reused across calls): [tile][k][lane], zero padded.
  thread_local std::vector<float> panel_buf;
  float* panel = aligned(panel_buf, tile_floats * static_cast<size_t>(n_tiles));
  pool.parallel_for(n_tiles, [&](int64_t t0, int64_t t1, int) {
    for (int64_t tl = t0; tl < t1; ++tl) {
      float* pt = panel + tl * tile_floats;
      std::memset(pt, 0, tile_floats * sizeof(float));
      thread_local std::vector<float> row;  // one token widened (exact), then spread over the lanes
      row.resize(static_cast<size_t>(k));
      for (int l = 0; l < kLanes && tl * kLanes + l < n_tokens; ++l) {
        dequantize_row(type, xc + (tl * kLanes + l) * x_row_bytes, row.data(), k);
        for (int64_t i = 0; i < k; ++i) pt[i * kLanes + l] = row[static_cast<size_t>(i)];
      }
    }
  });

  const int64_t n_row_tiles = (n_out + kRows - 1) / kRows;
  pool.parallel_for(n_row_tiles, [&](int64_t rt0, int64_t rt1, int) {
    thread_local std::vector<float> rows_buf;
    float* wt = aligned(rows_buf, static_cast<size_t>(kRows * k));
    for (int64_t rt = rt0; rt < rt1; ++rt) {
      const int64_t r0 = rt * kRows;
      const int n_rows = static_cast<int>(n_out - r0 < kRows ? n_out - r0 : kRows);
      for (int r = 0; r < kRows; ++r) {
        if (r < n_rows)
          dequantize_row(type, w.data + (r0 + r) * w.row_bytes(), wt + r * k, k);
        else
          std::memset(wt + r * k, 0, static_cast<size_t>(k) * sizeof(float));
      }
      for (int64_t tl = 0; tl < n_tiles; ++tl) {
        const int n_tok = static_cast<int>(n_tokens - tl * kLanes < kLanes ? n_tokens - tl * kLanes : kLanes);
        tile(wt, panel + tl * tile_floats, k, n_rows, n_tok, y + tl * kLanes * n_out + r0, n_out);
      }
    }
  });
#else
  (void)w, (void)xc, (void)x_row_bytes, (void)n_tokens, (void)y, (void)pool;
  throw std::invalid_argument("gemm_float: x86 only");
#endif
}

}  // namespace kvscope
