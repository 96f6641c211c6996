#pragma once
// The gated FFN activation over a whole batch: gate[i] = act(gate[i]) * up[i].
// On AVX-512 and AVX2+FMA CPUs (picked at run time) a vector exp serves both activations:
//   silu(x)      = x / (1 + exp(-x))
//   gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
// (the second form has no cancellation for negative x, unlike 1 + tanh). The exp is a
// Cephes-style degree-6 polynomial after range reduction (about 1 ulp), so results differ from
// the scalar silu / gelu_tanh in ops.cpp by a few f32 ulps; elsewhere those are used as they are.
// Before this the per-element std::tanh / std::exp took ~15% of a gemma prefill.
#include <cstdint>

#include "model/model_config.h"

namespace kvscope {

void ffn_activation_mul(FfnActivation act, float* gate, const float* up, int64_t n);
// True when ffn_activation_mul runs a vector exp (AVX-512 or AVX2) here; false: the scalar ops.cpp forms
// (whose tanh-GELU loses the negative tail to the cancellation in 1 + tanh(u)).
bool ffn_activation_vectorised();

}  // namespace kvscope
