#include "cpu/contiguous_attention.h"

#include <algorithm>
#include <vector>

#include "cpu/cpu_kv_storage.h"
#include "cpu/online_attention.h"
#include "cpu/thread_pool.h"

namespace kvscope {

void contiguous_attention_decode(ThreadPool& pool, const float* q, const ContiguousKv& kv, int32_t n_ctx,
                                 int32_t n_head, int32_t n_head_kv, int32_t d, float scale, float* out,
                                 int32_t first) {
  constexpr int32_t kChunk = OnlineAttention::kMaxChunk;
  const int32_t n_q = n_head / n_head_kv;
  const int64_t elem = kv_elem_bytes(kv.dtype);
  const int64_t row_bytes = static_cast<int64_t>(n_head_kv) * d * elem;  // one position of all KV heads
  const bool f32 = kv.dtype == KvDtype::F32;
  pool.parallel_for(n_head_kv, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> k_tile, v_tile;
    k_tile.resize(static_cast<size_t>(kChunk) * d);
    v_tile.resize(k_tile.size());
    for (int64_t g = begin; g < end; ++g) {
      const int64_t head_off = g * d * elem;
      OnlineAttention att(q + g * n_q * d, n_q, d, scale, out + g * n_q * d);
      for (int32_t p = first; p < n_ctx; p += kChunk) {
        const int32_t n = std::min(kChunk, n_ctx - p);
        const uint8_t* ks = kv.k + p * row_bytes + head_off;
        const uint8_t* vs = kv.v + p * row_bytes + head_off;
        if (f32) {  // rows read in place, like the paged path's f32 tiles
          att.add(reinterpret_cast<const float*>(ks), row_bytes / 4, reinterpret_cast<const float*>(vs), row_bytes / 4, n);
          continue;
        }
        const int64_t sc = static_cast<int64_t>(p) * n_head_kv + g;
        kv_decode_vectors(kv.dtype, ks, row_bytes, kv.k_scale ? kv.k_scale + sc : nullptr, n_head_kv, n, d, k_tile.data());
        kv_decode_vectors(kv.dtype, vs, row_bytes, kv.v_scale ? kv.v_scale + sc : nullptr, n_head_kv, n, d, v_tile.data());
        att.add(k_tile.data(), d, v_tile.data(), d, n);
      }
      att.finish();
    }
  });
}

}  // namespace kvscope
