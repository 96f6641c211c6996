#pragma once
// One token's step of a causal depthwise convolution with a per-channel state, as ggml's
// ssm_conv sums it (the oldest input first, in f32): Qwen3.5's Gated DeltaNet and Granite's
// Mamba-2 layers run it over [q; k; v] or [x; B; C] before their recurrences.
#include <cstdint>

#include "cpu/ops.h"

namespace kvscope {

// x[ch] <- silu(sum_k w[ch][k] window[k] + bias[ch]) over window = [the K - 1 past inputs in
// state[ch], x[ch]]; then state[ch] keeps the last K - 1 inputs. kernel: [channels][K];
// bias: nullptr for none.
inline void causal_conv_silu_step(float* state, const float* kernel, const float* bias, float* x, int64_t channels,
                                  int32_t K) {
  const int32_t taps = K - 1;
  for (int64_t ch = 0; ch < channels; ++ch) {
    float* s = state + ch * taps;
    const float* w = kernel + ch * K;
    float sum = 0.0f;
    for (int32_t k = 0; k < taps; ++k) sum += s[k] * w[k];
    sum += x[ch] * w[taps];
    for (int32_t k = 0; k + 1 < taps; ++k) s[k] = s[k + 1];
    s[taps - 1] = x[ch];
    if (bias) sum += bias[ch];
    x[ch] = silu(sum);
  }
}

}  // namespace kvscope
