#pragma once
// One sequence's decode attention at context `ctx` set up twice over the same random K/V: in a
// CpuBackend's block pool behind a shuffled block table (the paged path) and in plain contiguous
// [pos][kv_head][head_dim] arrays (the pre-paging layout). The paging-cost benchmark times the
// two against each other; tests check that they compute the same thing.
#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/contiguous_attention.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_kv_storage.h"

namespace kvscope {

class PagingProbe {
 public:
  // Throws std::invalid_argument for ctx < 1 or a block size the layout refuses.
  PagingProbe(std::shared_ptr<const Model> model, int32_t ctx, int32_t block_size, KvDtype dtype, int threads,
              uint64_t seed = 5);

  // Attention of layer l's query heads (the same random query for every layer); out: q_dim floats.
  void paged(int32_t layer, float* out);
  // Only where has_contiguous(): the sub-byte (tile-stored) dtypes have no per-vector copy.
  void contiguous(int32_t layer, float* out);
  bool has_contiguous() const { return has_contiguous_; }
  // Gives the contiguous reference the paged path's software prefetch rule (the backend's
  // prefetch threshold); off by default: the hardware prefetcher alone.
  void set_contiguous_prefetch(bool on) { contiguous_prefetch_ = on; }
  // Times the contiguous reference in [kv_head][pos][head_dim] order instead of [pos][kv_head]
  // (see ContiguousKv); both copies hold the same vectors.
  void set_contiguous_head_major(bool on) { head_major_ = on; }
  int32_t n_layer() const { return static_cast<int32_t>(first_.size()); }
  int64_t q_dim() const { return static_cast<int64_t>(q_.size()); }
  CpuBackend& backend() { return backend_; }

 private:
  std::shared_ptr<const Model> model_;
  int32_t ctx_;
  CpuBackend backend_;
  std::vector<BlockId> table_;  // shuffled: physical blocks in no particular order
  BatchView batch_;             // one decode token at position ctx - 1
  std::vector<float> q_;
  // Contiguous copies, one per layer, in the pool's kind of memory (huge pages where available):
  // [pos][kv_head] order, and the same vectors in [kv_head][pos] order (*_hm_).
  std::vector<KvBuffer> k_, v_, k_hm_, v_hm_;
  std::vector<std::vector<float>> k_scale_, v_scale_;        // scaled dtypes: [pos * n_head_kv + head]
  std::vector<std::vector<float>> k_scale_hm_, v_scale_hm_;  // [head * ctx + pos]
  bool has_contiguous_ = true;
  bool head_major_ = false;
  bool contiguous_prefetch_ = false;
  std::vector<int32_t> first_;  // [layer] first visible position (sliding-window layers see their window)
};

}  // namespace kvscope
