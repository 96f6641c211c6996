#pragma once
// Per-layer attention and FFN shapes (model_config.h LayerShape) for the architectures whose
// layers differ (gemma4).
#include "model/model_config.h"

namespace kvscope {

// Fills c.shapes, the model-wide KV heads and FFN width, the per-layer embedding width and the
// final logit soft-cap; needs the sliding-layer flags, head_dim and rope_dim read first. Throws
// ModelError naming the key that is missing or inconsistent.
void read_layer_shapes(const GgufFile& f, ModelConfig& c);

}  // namespace kvscope
