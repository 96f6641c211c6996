#pragma once
// One-token matmul (decode's GEMV) for Q8_0 / Q4_0 / Q5_0 / IQ4_NL / MXFP4 weights on AVX-512 VNNI CPUs: the
// activation row is unpacked once per call (cpu/gemv_kernels.h) and each thread runs four
// weight rows at a time past it, two blocks per zmm (cpu/gemv_avx512.cpp). Picked at run time,
// so a portable build uses it too. The result is bit for bit the AVX2 / VNNI vec_dot of a
// native build (same lane sums, scale products, fma order and reduction); a portable build's
// vec_dot is the scalar kernel, from which it differs by float summation order only
// (tests/cpu/test_gemv.cpp states and checks the bound).
#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/gguf_file.h"

namespace kvscope {

class ThreadPool;

// True when gemv() runs weights of this type on this CPU. KVSCOPE_GEMV=off in the
// environment turns the path off (A/B runs against the vec-dot loop).
bool gemv_handles(GgmlType type);

// y[r] = W[r] . x for one token, r < w.rows(); xc is x converted by convert_activations
// (Q8_0 blocks). Requires gemv_handles(w.type()).
void gemv(const TensorView& w, const uint8_t* xc, float* y, ThreadPool& pool);

// Several matrices against the same one-token input (Q, K and V; gate and up) in one pool
// call: one hand-off and one activation unpacking instead of one per matrix. All targets have
// the same ne(0) and gemv_handles(type); the results are those of gemv() on each.
struct GemvTarget {
  TensorView w;
  float* y;
};
void gemv_multi(std::span<const GemvTarget> targets, const uint8_t* xc, ThreadPool& pool);

}  // namespace kvscope
