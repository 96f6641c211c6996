#include "cpu/contiguous_attention.h"

#include <algorithm>
#include <vector>

#include "cpu/cpu_kv_storage.h"
#include "cpu/online_attention.h"
#include "cpu/thread_pool.h"

namespace kvscope {

void contiguous_attention_decode(ThreadPool& pool, const float* q, const ContiguousKv& kv, int32_t n_ctx,
                                 int32_t n_head, int32_t n_head_kv, int32_t d, float scale, float* out, int32_t first,
                                 int64_t prefetch_min_bytes) {
  constexpr int32_t kChunk = OnlineAttention::kMaxChunk;
  const int32_t n_q = n_head / n_head_kv;
  const int64_t elem = kv_elem_bytes(kv.dtype);
  // Bytes from one position to the next within a head, and from one head to the next.
  const int64_t row_bytes = kv.head_major ? d * elem : static_cast<int64_t>(n_head_kv) * d * elem;
  const int64_t head_bytes = kv.head_major ? kv.n_pos * d * elem : d * elem;
  const int64_t scale_stride = kv.head_major ? 1 : n_head_kv;
  const bool f32 = kv.dtype == KvDtype::F32;
  const bool prefetch = static_cast<int64_t>(n_ctx - first) * d * elem * 2 > prefetch_min_bytes;
  pool.parallel_for(n_head_kv, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> k_tile, v_tile;
    k_tile.resize(static_cast<size_t>(kChunk) * d);
    v_tile.resize(k_tile.size());
    for (int64_t g = begin; g < end; ++g) {
      const int64_t head_off = g * head_bytes;
      OnlineAttention att(q + g * n_q * d, n_q, d, scale, out + g * n_q * d);
      for (int32_t p = first; p < n_ctx; p += kChunk) {
        const int32_t n = std::min(kChunk, n_ctx - p);
        const uint8_t* ks = kv.k + p * row_bytes + head_off;
        const uint8_t* vs = kv.v + p * row_bytes + head_off;
        // This head's slice of each row of the next chunk (rows are n_head_kv slices apart).
        OnlineAttention::Prefetch pf[2 * kChunk];
        int32_t n_pf = 0;
        if (prefetch)
          for (int32_t j = p + kChunk; j < std::min(n_ctx, p + 2 * kChunk); ++j) {
            pf[n_pf++] = {kv.k + j * row_bytes + head_off, d * elem};
            pf[n_pf++] = {kv.v + j * row_bytes + head_off, d * elem};
          }
        auto add = [&](const float* k, int64_t k_stride, const float* v, int64_t v_stride) {
          const OnlineAttention::Rows r{k, k_stride, v, v_stride, n};
          n_pf > 0 ? att.add(&r, 1, pf, n_pf) : att.add(&r, 1);
        };
        if (f32) {  // rows read in place, like the paged path's f32 tiles
          add(reinterpret_cast<const float*>(ks), row_bytes / 4, reinterpret_cast<const float*>(vs), row_bytes / 4);
          continue;
        }
        const int64_t sc = kv.head_major ? g * kv.n_pos + p : static_cast<int64_t>(p) * n_head_kv + g;
        kv_decode_vectors(kv.dtype, ks, row_bytes, kv.k_scale ? kv.k_scale + sc : nullptr, scale_stride, n, d,
                          k_tile.data());
        kv_decode_vectors(kv.dtype, vs, row_bytes, kv.v_scale ? kv.v_scale + sc : nullptr, scale_stride, n, d,
                          v_tile.data());
        add(k_tile.data(), d, v_tile.data(), d);
      }
      att.finish();
    }
  });
}

}  // namespace kvscope
