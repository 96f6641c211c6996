#pragma once
// What of a model the CUDA backend does not run yet. Checked before anything is uploaded, so a
// model CUDA cannot run exactly is refused with the missing piece named instead of giving
// plausible but wrong logits. Host code: tests call it without a GPU.
#include <string>

#include "model/model.h"

namespace kvscope {

// "" when the CUDA backend runs the model; otherwise what it lacks, as a sentence.
std::string cuda_missing_piece(const Model& model);

}  // namespace kvscope
