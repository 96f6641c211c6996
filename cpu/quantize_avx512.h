#pragma once
// AVX-512 versions of the activation rounding in quant_dot.cpp (Q8_0 and Q8_K blocks), byte for
// byte the same as the scalar code: same max, same f32 scale, x * scale rounded half-even by
// vcvtps2dq exactly as lrintf does, same clamps. Picked at run time; test_gemm checks the bytes.
#include <cstdint>

namespace kvscope {

bool quantize_avx512_available();
// n is a whole number of blocks (32 / 256); dst gets BlockQ8_0 / BlockQ8_K blocks.
void quantize_q8_0_avx512(const float* x, uint8_t* dst, int64_t n);
void quantize_q8_k_avx512(const float* x, uint8_t* dst, int64_t n);

}  // namespace kvscope
