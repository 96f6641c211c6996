// y[t][r] = W[r] . x[t]. Activations are rounded to the weight's vec-dot type once per call;
// threads split the output rows. Within a thread, a tile of kTileRows weight rows is swept
// across every token before moving on, so those rows are read from memory once and then
// served from cache for the remaining tokens.
#include "cpu/matmul.h"

#include <stdexcept>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gemv.h"
#include "cpu/quant_dot.h"
#include "cpu/thread_pool.h"

namespace kvscope {

namespace {
constexpr int64_t kTileRows = 4;
void matmul_impl(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool, bool allow_gemm) {
  if (!w.info) throw std::invalid_argument("matmul: empty weight view");
  if (n_tokens <= 0) return;
  const GgmlType type = w.type();
  const int64_t n_in = w.ne(0);
  const int64_t n_out = w.rows();
  const size_t w_row_bytes = w.row_bytes();

  // F32 weights take the activations as they are; other types need a converted copy. The
  // buffer belongs to the calling thread and is reused, so decode steps do not allocate.
  const void* xc = x;
  size_t x_row_bytes = static_cast<size_t>(n_in) * sizeof(float);
  if (vec_dot_type(type) != GgmlType::F32) {
    thread_local std::vector<uint8_t> buffer;
    x_row_bytes = vec_dot_row_bytes(type, n_in);
    buffer.resize(x_row_bytes * static_cast<size_t>(n_tokens));
    uint8_t* dst = buffer.data();
    auto convert = [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) convert_activations(type, x + t * n_in, dst + t * x_row_bytes, n_in);
    };
    if (n_tokens > 1)
      pool.parallel_for(n_tokens, convert);
    else
      convert(0, 1, 0);
    xc = dst;
  }
  const auto* xb = static_cast<const uint8_t*>(xc);

  // Several tokens: the rows x tokens micro-kernels (cpu/gemm.h), same integer sums and
  // per-block float scaling as the scalar vec-dot.
  if (allow_gemm && n_tokens >= kMatmulGemmMinTokens && gemm_handles(type)) {
    const GemmIsa isa = gemm_best_isa();
    if (isa != GemmIsa::None) {
      gemm(isa, w, xb, x_row_bytes, n_tokens, y, pool);
      return;
    }
  }

  // One token (decode): the multi-row GEMV, bit for bit the vec-dot below on a native build.
  if (allow_gemm && n_tokens == 1 && gemv_handles(type)) {
    gemv(w, xb, y, pool);
    return;
  }

  const int64_t n_tiles = (n_out + kTileRows - 1) / kTileRows;
  pool.parallel_for(n_tiles, [&](int64_t tile_begin, int64_t tile_end, int) {
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int64_t r0 = tile * kTileRows;
      const int64_t r1 = r0 + kTileRows < n_out ? r0 + kTileRows : n_out;
      for (int64_t t = 0; t < n_tokens; ++t) {
        const uint8_t* xt = xb + t * x_row_bytes;
        for (int64_t r = r0; r < r1; ++r) y[t * n_out + r] = vec_dot(type, n_in, w.data + r * w_row_bytes, xt);
      }
    }
  });
}

}  // namespace

void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  matmul_impl(w, x, n_tokens, y, pool, true);
}

void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool) {
  bool fused = n_tokens == 1 && targets.size() > 1 && targets.size() <= 8;
  for (const MatmulTarget& t : targets) fused = fused && gemv_handles(t.w->type()) && t.w->ne(0) == targets[0].w->ne(0);
  if (!fused) {
    for (const MatmulTarget& t : targets) matmul(*t.w, x, n_tokens, t.y, pool);
    return;
  }
  // Every GEMV type rounds its activations to Q8_0 blocks: one conversion serves all.
  const GgmlType type = targets[0].w->type();
  const int64_t n_in = targets[0].w->ne(0);
  thread_local std::vector<uint8_t> buffer;
  buffer.resize(vec_dot_row_bytes(type, n_in));
  convert_activations(type, x, buffer.data(), n_in);
  GemvTarget g[8];
  for (size_t i = 0; i < targets.size(); ++i) g[i] = {*targets[i].w, targets[i].y};
  gemv_multi(std::span<const GemvTarget>(g, targets.size()), buffer.data(), pool);
}

void matmul_vec_dot(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  matmul_impl(w, x, n_tokens, y, pool, false);
}

}  // namespace kvscope
