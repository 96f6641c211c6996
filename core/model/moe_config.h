#pragma once
// The mixture-of-experts settings of a model, read per architecture as llama.cpp reads them.
#include "model/model_config.h"

namespace kvscope {

class GgufFile;

// MoeConfig{} for a dense model. Throws ModelError naming the key on inconsistent settings
// (used experts more than present, experts without a used count, ...). Needs c.arch, c.n_ff,
// c.n_layer already read.
MoeConfig read_moe_config(const GgufFile& f, const ModelConfig& c);

}  // namespace kvscope
