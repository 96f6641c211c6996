#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvscope {

void rms_norm(const float* x, const float* w, float* y, int32_t n, float eps) {
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(sum / n) + eps);
  if (!w) {  // a norm without a weight (gemma4's V)
    for (int32_t i = 0; i < n; ++i) y[i] = x[i] * scale;
    return;
  }
  for (int32_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

namespace {

// cos and sin of every pair's angle at pos into cs[2i], cs[2i+1]: ggml's rope cache
// (ggml_rope_cache_init + rope_yarn). theta_i = pos * base^(-2i/n_rot), built by repeated
// multiplication in f32 so the angles round the way llama.cpp's do; the angle is
// freq_scale * theta / factor_i, blended with theta / factor_i by YaRN's ramp when on.
void rope_cache_row(int32_t n_rot, int32_t pos, float base, float freq_scale, const float* freq_factors,
                    const RopeYarn* yarn, float* cs) {
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
  float low = 0.0f, high = 0.0f, mscale = 1.0f;
  const bool mix = yarn && yarn->on();
  if (mix) yarn->corr_dims(n_rot, base, &low, &high);
  if (yarn) mscale = mix ? yarn->mscale() : yarn->attn_factor;
  float theta = static_cast<float>(pos);
  for (int32_t i = 0; i < n_rot / 2; ++i) {
    const float extrap = freq_factors ? theta / freq_factors[i] : theta;
    float angle = freq_scale * extrap;
    if (mix) {
      const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
      const float ramp = (1.0f - std::min(1.0f, std::max(0.0f, y))) * yarn->ext_factor;
      angle = angle * (1.0f - ramp) + extrap * ramp;
    }
    cs[2 * i] = std::cos(angle) * mscale;
    cs[2 * i + 1] = std::sin(angle) * mscale;
    theta *= theta_scale;
  }
}

}  // namespace

void rope_inplace(float* x, int32_t n_rot, int32_t pos, float base, float freq_scale, RopeStyle style,
                  const float* freq_factors, const RopeYarn* yarn) {
  float cs[1024];
  if (n_rot > 1024) throw std::invalid_argument("rope: more than 1024 rotated dims");
  rope_cache_row(n_rot, pos, base, freq_scale, freq_factors, yarn, cs);
  rope_apply(x, n_rot, cs, style);
}

void rope_cos_sin_row(int32_t n_rot, int32_t pos, float base, float freq_scale, float* cs, const float* freq_factors,
                      const RopeYarn* yarn) {
  rope_cache_row(n_rot, pos, base, freq_scale, freq_factors, yarn, cs);
}

void rope_apply(float* x, int32_t n_rot, const float* cs, RopeStyle style) {
  const int32_t half = n_rot / 2;
  for (int32_t i = 0; i < half; ++i) {
    float* a = style == RopeStyle::Normal ? &x[2 * i] : &x[i];
    float* b = style == RopeStyle::Normal ? &x[2 * i + 1] : &x[i + half];
    const float c = cs[2 * i], s = cs[2 * i + 1];
    const float x0 = *a, x1 = *b;
    *a = x0 * c - x1 * s;
    *b = x0 * s + x1 * c;
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoef * x * x)));
}

void softmax_inplace(float* x, int32_t n) {
  float mx = -INFINITY;
  for (int32_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int32_t i = 0; i < n; ++i) x[i] *= inv;
}

float dot_f32(const float* a, const float* b, int32_t n) {
  // Several accumulators let the compiler vectorise without -ffast-math.
  float acc[16] = {0};
  int32_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += a[i + k] * b[i + k];
  float s = 0.0f;
  for (int k = 0; k < 16; ++k) s += acc[k];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32(float a, const float* x, float* y, int32_t n) {
  for (int32_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace kvscope
