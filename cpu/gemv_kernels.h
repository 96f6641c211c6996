#pragma once
// Internal to gemv*.cpp: the one-token activation row in the layout the AVX-512 GEMV kernels
// read, and the kernel entry point (cpu/gemv_avx512.cpp, built with per-function targets).
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"

namespace kvscope::gemv_detail {

// A Q8_0-rounded activation row (convert_activations' blocks), unpacked once per call:
//   qs   nb * 32 bytes, the blocks' levels back to back, so one zmm load covers 2 blocks;
//   bias nb * 8 int32, lane i of block b = -offset * (sum of levels 4i..4i+3), which removes the
//        weight's unsigned offset (128 / 8 / 16 / 128 / 128 for Q8_0 / Q4_0 / Q5_0 / IQ4_NL / MXFP4) from each vpdpbusd lane;
//   dx   nb * 16 floats per block pair: the two blocks' f16 scales widened, 8 lanes each.
// Every lane's integer sum is then exactly that of the sign-trick vec-dot (quant_dot_simd.cpp).
struct PackedQ8Row {
  const uint8_t* qs = nullptr;
  const int32_t* bias = nullptr;
  const float* dx = nullptr;
  int64_t nb = 0;
};

// y[r - r0] for weight rows [r0, r1) of a Q8_0 / Q4_0 / Q5_0 / IQ4_NL / MXFP4 matrix (row_bytes apart from w).
void gemv_q8_family_avx512(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t r0, int64_t r1,
                           const PackedQ8Row& x, float* y);

}  // namespace kvscope::gemv_detail
