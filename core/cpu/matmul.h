#pragma once
// y[t][r] = W[r] . x[t] for a weight matrix W (GGUF tensor, ne[0] = in features, ne[1] = out rows)
// and a batch of n_tokens activation rows. Activations are converted once per call, then the
// rows of W are split across the thread pool so each weight row is read once for all tokens.
#include <cstdint>

#include "gguf/gguf_file.h"

namespace kvscope {

class ThreadPool;

void matmul(const TensorView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

}  // namespace kvscope
