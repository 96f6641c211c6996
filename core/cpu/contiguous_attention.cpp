#include "cpu/contiguous_attention.h"

#include <algorithm>
#include <vector>

#include "cpu/ops.h"
#include "cpu/thread_pool.h"

namespace kvscope {

void contiguous_attention_decode(ThreadPool& pool, const float* q, const float* k, const float* v, int32_t n_ctx,
                                 int32_t n_head, int32_t n_head_kv, int32_t d, float scale, float* out) {
  const int64_t row = static_cast<int64_t>(n_head_kv) * d;  // one position of all KV heads
  pool.parallel_for(n_head, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(n_ctx));
    for (int64_t h = begin; h < end; ++h) {
      const int32_t g = static_cast<int32_t>(h) / (n_head / n_head_kv);
      const float* qh = q + h * d;
      for (int32_t j = 0; j < n_ctx; ++j) scores[static_cast<size_t>(j)] = dot_f32(qh, k + j * row + g * d, d) * scale;
      softmax_inplace(scores.data(), n_ctx);
      float* oh = out + h * d;
      std::fill(oh, oh + d, 0.0f);
      for (int32_t j = 0; j < n_ctx; ++j) axpy_f32(scores[static_cast<size_t>(j)], v + j * row + g * d, oh, d);
    }
  });
}

}  // namespace kvscope
