#pragma once
// The CPU copy of the KV block pool: per layer one K and one V array laid out as KvLayout says,
// plus, for the scaled 8-bit dtypes, parallel f32 scale arrays [block][kv_head][slot] (one scale
// per stored head vector, see kv/kv_quant.h).
#include <cstdint>
#include <vector>

#include "kv/kv_layout.h"

namespace kvscope {

class CpuKvStorage {
 public:
  void init(const KvLayout& layout);  // throws std::bad_alloc-derived error with a clear message
  const KvLayout& layout() const { return layout_; }

  // Store one head vector (head_dim floats) at (layer, slot, head), converting to the KV dtype
  // (quantizing with a fresh per-vector scale for int8/fp8).
  void store(int32_t layer, bool is_value, int64_t slot, int32_t head, const float* x);
  // Read the rows [0, n) of the tile (layer, block, head) as f32 into dst[n][head_dim];
  // returns a pointer to f32 rows (the storage itself for f32, dst otherwise).
  const float* load_tile(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t n, float* dst) const;
  // Asks the CPU to start loading a tile's first n slots. Blocks of a sequence sit anywhere in
  // the pool, so the hardware prefetcher cannot guess the next one; the block table can.
  void prefetch_tile(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t n) const;
  void copy_block(int32_t src_block, int32_t dst_block, int32_t n_slots);
  // Bytes actually allocated (elements + scales); equals layout().total_bytes().
  int64_t allocated_bytes() const;

 private:
  uint8_t* tile_ptr(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot) const;
  float* scale_ptr(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot) const;
  KvLayout layout_;
  int64_t elem_bytes_ = 4;
  bool scaled_ = false;
  std::vector<std::vector<uint8_t>> k_, v_;       // [n_layer] each num_blocks * block bytes
  std::vector<std::vector<float>> k_scale_, v_scale_;  // [n_layer][block][kv_head][slot], scaled dtypes only
};

}  // namespace kvscope
