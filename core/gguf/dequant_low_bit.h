#pragma once
// Internal to ggml_types.cpp: dequantizers of the 2-, 3- and non-linear 4-bit weight types
// (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4), bit-exact against ggml's dequantize_row_* reference.
#include <cstdint>

namespace kvscope::dequant {

// src: n / block_elems blocks at any alignment; dst: n floats.
void q2_k(const uint8_t* src, float* dst, int64_t n);
void q3_k(const uint8_t* src, float* dst, int64_t n);
void iq4_nl(const uint8_t* src, float* dst, int64_t n);
void iq4_xs(const uint8_t* src, float* dst, int64_t n);
void mxfp4(const uint8_t* src, float* dst, int64_t n);

}  // namespace kvscope::dequant
