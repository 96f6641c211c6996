#pragma once
// Dot products between a weight row stored in its GGUF type and activations rounded to the
// weight's "vec-dot type", exactly as ggml's CPU backend does it (F16 weights -> f16 activations,
// BF16 -> bf16, Q8_0/Q4_0/Q5_0/IQ4_NL -> Q8_0 blocks, Q4_1/Q5_1 -> Q8_1 blocks, K-quants and
// IQ4_XS -> Q8_K blocks, F32 -> f32). Emulating that
// rounding is what lets us match llama.cpp's logits on quantized models closely, and integer
// dot products are also the fast path on CPUs. SIMD (AVX2 / AVX-512) when compiled for it,
// with a scalar path that is the reference in tests.
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"

namespace kvscope {

GgmlType vec_dot_type(GgmlType weight_type);
// Bytes needed to hold n activations converted to vec_dot_type(weight_type).
size_t vec_dot_row_bytes(GgmlType weight_type, int64_t n);
// Round n f32 activations to vec_dot_type(weight_type) into dst (vec_dot_row_bytes bytes).
void convert_activations(GgmlType weight_type, const float* x, void* dst, int64_t n);
// The same without the AVX-512 quantizers (cpu/quantize_avx512.h): the oracle in tests.
void convert_activations_scalar(GgmlType weight_type, const float* x, void* dst, int64_t n);
// sum_i w[i] * x[i] for one row of n elements; x was produced by convert_activations.
float vec_dot(GgmlType weight_type, int64_t n, const void* w_row, const void* x_converted);
// Plain scalar versions of the above (the oracle for the SIMD paths).
float vec_dot_scalar(GgmlType weight_type, int64_t n, const void* w_row, const void* x_converted);

}  // namespace kvscope
