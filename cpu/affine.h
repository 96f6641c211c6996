#pragma once
// A matrix output's optional bias and per-tensor scale (model/model_weights.h's Affine), in the
// order the architecture's llama.cpp graph applies them.
#include <cstdint>

#include "model/model_weights.h"

namespace kvscope {

enum class AffineOrder {
  ScaleThenBias,  // attention's q/k/v/out: build_lora_mm scales, then the bias is added
  BiasThenScale,  // the FFN's matrices: build_ffn adds the bias, then scales
};

// rows x dim floats at y.
inline void apply_affine(float* y, int64_t rows, int64_t dim, const Affine& a, AffineOrder order) {
  const bool bias = !a.bias.empty(), scale = a.scale != 1.0f;
  if (!bias && !scale) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * dim;
    if (order == AffineOrder::BiasThenScale) {
      for (int64_t i = 0; i < dim; ++i) yr[i] = (yr[i] + (bias ? a.bias[static_cast<size_t>(i)] : 0.0f)) * a.scale;
    } else {
      for (int64_t i = 0; i < dim; ++i) yr[i] = yr[i] * a.scale + (bias ? a.bias[static_cast<size_t>(i)] : 0.0f);
    }
  }
}

}  // namespace kvscope
