#pragma once
// y[t][r] = W[r] . x[t] for a weight matrix W (GGUF tensor, ne[0] = in features, ne[1] = out rows)
// and a batch of n_tokens activation rows. Activations are converted once per call, then the
// rows of W are split across the thread pool so each weight row is read once for all tokens.
#include <cstdint>
#include <span>

#include "gguf/gguf_file.h"

namespace kvscope {

class ThreadPool;

// From this many tokens on, types with GEMM kernels go to cpu/gemm.h when the CPU has them;
// below it the GEMM would still compute a full 8-token tile (benchmarks/gemm_bench.cpp).
constexpr int64_t kMatmulGemmMinTokens = 4;
// n_tokens >= kMatmulGemmMinTokens of a type with GEMM kernels goes to the GEMM.
void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);
// Several matrices against the same activations x (Q, K and V; gate and up): the results of
// matmul() on each. One token of types the GEMV handles (cpu/gemv.h) is converted once and all
// targets run in one pool hand-off.
struct MatmulTarget {
  const TensorView* w;
  float* y;
};
void matmul_shared_input(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool);
// Always one vec-dot per (row, token): the path before the GEMM (benchmarks compare the two).
void matmul_vec_dot(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

}  // namespace kvscope
