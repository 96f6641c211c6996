#pragma once
// Per-layer attention and FFN shapes (model_config.h LayerShape) for the architectures whose
// layers differ (gemma4).
#include "model/model_config.h"

namespace kvscope {

// Fills c.shapes, the model-wide KV heads and FFN width, the per-layer embedding width and the
// final logit soft-cap; needs the sliding-layer flags, head_dim and rope_dim read first. Throws
// ModelError naming the key that is missing or inconsistent.
void read_layer_shapes(const GgufFile& f, ModelConfig& c);

// A key that is one integer for every layer or an array of (at least) one per layer, as n_layer
// values; def when absent (nullptr: required). Throws ModelError naming the key.
std::vector<int64_t> per_layer_ints(const GgufFile& f, const std::string& key, int32_t n_layer, const int64_t* def);

}  // namespace kvscope
