#pragma once
// Internal to kv_quant4.cpp: AVX2 + FMA + F16C forms of the sub-byte KV decoders, 8 channels per
// step. Same layouts and the same arithmetic as the scalar forms (codes widened to int32, then
// float; y = fma(code, scale, min), or (code - 8) * scale for int4), so the results are the same
// bits. Attention decodes every visible K/V row through these on each step, which is why the
// 4-bit formats were twice as slow as int8 per decode step with the scalar loops.
#include <cstdint>

namespace kvscope::kvq4::simd {

bool available();  // this CPU runs them (checked once)
// g (the group) a multiple of 8 for the row decoders, d a multiple of 8 for the others.
void decode_int4_row(const uint8_t* row, int32_t d, int32_t g, float* y);
void decode_asym_row(const uint8_t* row, int32_t d, int32_t g, int32_t bits, float* y);
void decode_channel_rows(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n, int32_t d,
                         int32_t bits, float* y);
void decode_f16_rows(const uint16_t* h, int32_t n, int32_t d, float* y);

}  // namespace kvscope::kvq4::simd

// Internal to kv_quant4.cpp: the AVX-512 (F, BW, VL) forms, 16 channels per step
// (cpu/kv_quant4_avx512.cpp); the same bits again. g a multiple of 16 for the row decoders, d a
// multiple of 16 for the others.
namespace kvscope::kvq4::avx512 {

bool available();
void decode_int4_row(const uint8_t* row, int32_t d, int32_t g, float* y);
void decode_asym_row(const uint8_t* row, int32_t d, int32_t g, int32_t bits, float* y);
void decode_channel_rows(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n, int32_t d,
                         int32_t bits, float* y);
void decode_f16_rows(const uint16_t* h, int32_t n, int32_t d, float* y);
// decode_int4_row of n rows with m[c] added to channel c (g a multiple of 16).
void decode_int4_rows_plus(const uint8_t* rows, int64_t stride, int32_t n, int32_t d, int32_t g, const float* m,
                           float* y);

}  // namespace kvscope::kvq4::avx512
