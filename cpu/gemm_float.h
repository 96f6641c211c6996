#pragma once
// Internal to gemm.cpp: the GEMM for float weights (F32, F16, BF16), n_tokens > 1.
//
// ggml rounds the activations to the weight's type (F16 -> f16, BF16 -> bf16: vec_dot_type);
// the rounded values are exact in f32, so the kernel widens both sides to f32 once per call and
// multiplies in f32. Each (row, token) is one fused multiply-add chain in k order starting at
// 0, so the result is bit for bit the scalar `acc = fma(w[k], x[k], acc)` loop (the test's
// reference); the SIMD vec_dot sums in 32 lanes instead, so against it the difference is float
// summation error (bound stated in tests/cpu/test_gemm.cpp).
//
// Tile: 4 weight rows (widened to f32, 4 * K floats: 32 KB at K = 2048) x 16 tokens (a panel of
// [K][16] floats, tokens in the lanes of two ymm registers): per k, 2 panel loads, 4 broadcasts
// and 8 FMAs into 8 accumulators. AVX2 + FMA + F16C (every AVX2 CPU has F16C); AVX-512 CPUs
// run the same kernel (these types are rare in quantized models: norms aside, only
// F16/BF16/F32 checkpoints and small test models use them).
#include <cstddef>
#include <cstdint>

#include "gguf/gguf_file.h"

namespace kvscope {

class ThreadPool;

bool gemm_float_handles(GgmlType type);
// xc: activations converted by convert_activations (x_row_bytes apart). Requires AVX2+FMA+F16C.
void gemm_float(const TensorView& w, const uint8_t* xc, size_t x_row_bytes, int64_t n_tokens, float* y,
                ThreadPool& pool);

}  // namespace kvscope
