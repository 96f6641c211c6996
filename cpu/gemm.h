#pragma once
// Batched matmul for several tokens (prefill chunks, batched decode, eval): register-blocked
// int8 micro-kernels (rows x tokens tiles, vpdpbusd on AVX-512 VNNI, maddubs on AVX2), picked
// at run time from what the CPU supports, so a portable build still gets them.
//
// Exactness: activations are the same ggml-rounded blocks the vec-dot path uses
// (convert_activations), every block's integer sum is exact, and each block is scaled and
// added in block order with the scalar vec-dot's float expression, so for every type the
// result is bit-for-bit vec_dot_scalar (tests/cpu/test_gemm.cpp). The SIMD vec-dot of Q8_0/Q4_0/
// Q5_0 sums blocks in 8 float lanes instead, so against it the difference is float rounding.
#include <cstddef>
#include <cstdint>

#include "gguf/gguf_file.h"

namespace kvscope {

class ThreadPool;

enum class GemmIsa { None, Avx2, Avx512Vnni };

// The best kernels this CPU runs (None: no SIMD path, callers use the vec-dot loop).
// KVSCOPE_GEMM=off|avx2|avx512 in the environment caps it (benchmarks, A/B runs).
GemmIsa gemm_best_isa();
bool gemm_isa_supported(GemmIsa isa);
const char* gemm_isa_name(GemmIsa isa);
// Weight types with GEMM kernels: Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4 (Q8_0 activations), Q2_K, Q3_K, Q4_K,
// Q6_K, IQ4_XS (Q8_K), and F32 / F16 / BF16 (cpu/gemm_float.h: widened to f32, FMA chains).
bool gemm_handles(GgmlType type);

// y[t * n_out + r] = W[r] . x[t] for t < n_tokens; xc holds the activations already converted
// by convert_activations (x_row_bytes apart). isa must be supported and type handled.
void gemm(GemmIsa isa, const TensorView& w, const uint8_t* xc, size_t x_row_bytes, int64_t n_tokens, float* y,
          ThreadPool& pool);

}  // namespace kvscope
