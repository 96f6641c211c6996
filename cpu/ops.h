#pragma once
// Element-wise and per-row operations of the transformer forward, f32, matching ggml's CPU math.
#include <cstdint>

#include "model/model_config.h"

namespace kvscope {

// y = x / sqrt(mean(x^2) + eps) * w   (sum in double, as ggml does)
void rms_norm(const float* x, const float* w, float* y, int32_t n, float eps);
// Rotates the first n_rot dims of one head vector in place for position pos. freq_factors
// (n_rot/2 values, or null): llama 3.1+ per-pair divisors of the angle (rope_freqs.weight).
// yarn (or null): YaRN's blend of interpolated and original angles and its magnitude
// (model_config.h RopeYarn); freq_scale is then the interpolation's.
void rope_inplace(float* x, int32_t n_rot, int32_t pos, float base, float freq_scale, RopeStyle style,
                  const float* freq_factors = nullptr, const RopeYarn* yarn = nullptr);
// The same rotation split in two, for callers that rotate many vectors by few positions
// (attention sinks rotate keys at attention time): cs[2i], cs[2i+1] = cos, sin of pair i's angle
// (n_rot floats), computed as rope_inplace does (same f32 angle recurrence), so
// rope_apply(rope_cos_sin_row(pos)) equals rope_inplace(pos) up to FMA contraction.
void rope_cos_sin_row(int32_t n_rot, int32_t pos, float base, float freq_scale, float* cs,
                      const float* freq_factors = nullptr, const RopeYarn* yarn = nullptr);
void rope_apply(float* x, int32_t n_rot, const float* cs, RopeStyle style);
float silu(float x);
float sigmoid(float x);
float softplus(float x);   // log(1 + e^x), x itself above 20 (ggml's threshold)
float gelu_tanh(float x);  // exact f32 tanh-GELU (llama.cpp uses an f16 table on CPU; see docs/quality.md)
// In-place numerically stable softmax of n values.
void softmax_inplace(float* x, int32_t n);
float dot_f32(const float* a, const float* b, int32_t n);
// y += a * x
void axpy_f32(float a, const float* x, float* y, int32_t n);

}  // namespace kvscope
