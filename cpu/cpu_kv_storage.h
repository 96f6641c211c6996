#pragma once
// The CPU copy of the KV block pool: per layer one K and one V array laid out as KvLayout says,
// plus, for the scaled 8-bit dtypes, parallel f32 scale arrays [block][kv_head][slot] (one scale
// per stored head vector, see kv/kv_quant.h). The packed 4/2-bit dtypes (cpu/kv_quant4.h) keep
// their f16 parameters inside the tile: a tile is block_size rows of kv_row_bytes, then
// kv_tile_extra_bytes (KIVI keys' per-channel parameters, rot4c keys' center). KIVI's residual
// (rot4c uses it the same way, kv_dtype_block_quantized): while a block fills,
// its tokens live in f16 in a side table keyed by (layer, block); when the block's last slot is
// written the block is quantized (keys per channel over the block, values per token) and the
// residual freed. Full blocks (the only ones the prefix cache shares) are never rewritten.
// With defer_completion on (CpuBackend), that quantization waits for complete_deferred(layer),
// which the backend calls after the layer's attention: the tokens of a step attend to the
// blocks they fill in f16, as KIVI's prefill attends in full precision, and the result does not
// depend on how a prompt is cut into chunks.
// With layout.kivi_residual R > 0 a full block is not quantized at its last slot at all: the
// backend calls complete_block() once R tokens of the sequence lie after it (it knows the
// sequences, the storage does not), and release_block() when the pool frees a block that is
// still in the residual, so a stale entry is never counted or read.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/kv_layout.h"

namespace kvscope {

// The element conversions of the KV dtypes, shared by the pool below and by layouts that are not
// paged (the contiguous reference attention), so both read K/V the same way.
// Stores one head vector of d floats at dst; returns its scale (1 for unscaled dtypes).
float kv_encode_vector(KvDtype dtype, const float* x, int32_t d, uint8_t* dst);
// Reads n stored head vectors as f32 rows dst[n][d]; vector r starts at src + r * src_stride
// bytes, its scale (scaled dtypes) is scales[r * scale_stride]. One dtype dispatch per call.
void kv_decode_vectors(KvDtype dtype, const uint8_t* src, int64_t src_stride, const float* scales, int64_t scale_stride,
                       int32_t n, int32_t d, float* dst);

// A KV array (one layer's K or V): zeroed, 2 MiB-aligned and (Linux) backed by transparent huge
// pages where the system allows, because attention jumps between scattered blocks and 4 KiB
// pages would cost a TLB miss at about every block (a contiguous array is streamed instead).
struct KvBuffer {
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> mem;
  size_t bytes = 0;
  explicit KvBuffer(size_t n);  // throws std::bad_alloc
  uint8_t* data() const { return mem.get(); }
  size_t size() const { return bytes; }
};

class CpuKvStorage {
 public:
  void init(const KvLayout& layout);  // throws std::bad_alloc-derived error with a clear message
  const KvLayout& layout() const { return layout_; }

  // Store one head vector (head_dim floats) at (layer, slot, head), converting to the KV dtype
  // (quantizing with a fresh per-vector scale for int8/fp8).
  void store(int32_t layer, bool is_value, int64_t slot, int32_t head, const float* x);
  // Read the rows [0, n) of the tile (layer, block, head) as f32 into dst[n][head_dim];
  // returns a pointer to f32 rows (the storage itself for f32, dst otherwise).
  const float* load_tile(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t n, float* dst) const {
    return load_rows(layer, is_value, block, head, 0, n, dst);
  }
  // Rows [slot, slot + n) of that tile as f32: the storage itself for f32 (no copy), else
  // dequantized into dst[n][head_dim].
  // Inline, like the pointer arithmetic below: the paged attention loop calls these once per
  // block, and out-of-line calls there cost several percent of attention time at block size 16.
  const float* load_rows(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot, int32_t n,
                         float* dst) const {
    if (layout_.dtype == KvDtype::F32)
      return reinterpret_cast<const float*>(tile_ptr(layer, is_value, block, head, slot));
    return decode_rows(layer, is_value, block, head, slot, n, dst);
  }
  // Where a tile's first n slots are stored, and how many bytes they take: what to prefetch.
  std::pair<const uint8_t*, int64_t> tile_span(int32_t layer, bool is_value, int32_t block, int32_t head,
                                               int32_t n) const {
    return {tile_ptr(layer, is_value, block, head, 0), static_cast<int64_t>(n) * row_bytes_[is_value]};
  }
  // Prefetches the per-vector scales of a block's tile (scaled dtypes; nothing otherwise).
  void prefetch_scales(int32_t layer, int32_t block, int32_t head) const {
    if (!scaled_) return;
    __builtin_prefetch(scale_ptr(layer, false, block, head, 0), 0, 2);
    if (!layout_.latent) __builtin_prefetch(scale_ptr(layer, true, block, head, 0), 0, 2);
  }
  void copy_block(int32_t src_block, int32_t dst_block, int32_t n_slots);
  // One slot's K and V (every layer and head, scales included) to another slot: token
  // eviction's compaction. Not for KIVI, whose keys are quantized over the whole block.
  void copy_slot(int64_t src_slot, int64_t dst_slot);
  // Bytes actually allocated (elements + scales); equals layout().total_bytes().
  int64_t allocated_bytes() const;
  // KIVI: f16 bytes the residual holds now, and the most it held since init.
  int64_t residual_bytes() const { return static_cast<int64_t>(residual_.size()) * residual_block_bytes_; }
  int64_t peak_residual_bytes() const { return peak_residual_bytes_; }
  // KIVI: whether (layer, block, head)'s K or V is still in the f16 residual (block not full,
  // or full and its quantization deferred).
  bool in_residual(int32_t layer, bool is_value, int32_t block, int32_t head) const;
  // KIVI: off (the default), a tile is quantized when its last slot is stored; on, it waits for
  // complete_deferred(layer), which quantizes every full tile of that layer stored since.
  void defer_completion(bool on) { defer_ = on; }
  void complete_deferred(int32_t layer);
  // KIVI with kivi_residual > 0: whether (layer, block) still has an entry in the residual, and
  // quantizing a full one (every tile of it not yet quantized; the caller knows it is full).
  bool block_pending(int32_t layer, int32_t block) const { return residual_.contains(residual_key(layer, block)); }
  void complete_block(int32_t layer, int32_t block);
  // The pool freed `block` (no reader left): drop its residual in every layer. No-op otherwise.
  void release_block(int32_t block);

 private:
  const float* decode_rows(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot, int32_t n,
                           float* dst) const;  // load_rows for the dtypes that need converting
  uint8_t* tile_ptr(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot) const {
    const auto& arr = is_value ? v_[static_cast<size_t>(layer)] : k_[static_cast<size_t>(layer)];
    return arr.data() + (static_cast<int64_t>(block) * layout_.n_head_kv + head) * tile_bytes_[is_value] +
           slot * row_bytes_[is_value];
  }
  // The packed dtypes' store and decode (cpu_kv_packed.cpp).
  struct Residual {
    std::vector<uint16_t> rows;  // [is_value][head][slot][head_dim] f16
    std::vector<uint8_t> done;   // [is_value][head]: that tile was quantized
    int32_t n_done = 0;
  };
  void store_packed(int32_t layer, bool is_value, int32_t block, int32_t off, int32_t head, const float* x);
  void decode_packed(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot, int32_t n,
                     float* dst) const;
  void complete_tile(int32_t layer, bool is_value, int32_t block, int32_t head, Residual& r);
  void copy_residual(int32_t layer, int32_t src_block, int32_t dst_block);
  int64_t residual_key(int32_t layer, int32_t block) const {
    return static_cast<int64_t>(layer) * layout_.num_blocks + block;
  }
  uint16_t* residual_rows(Residual& r, bool is_value, int32_t head) const {
    return r.rows.data() +
           ((static_cast<int64_t>(is_value) * layout_.n_head_kv + head) * layout_.block_size) * layout_.head_dim;
  }
  float* scale_ptr(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot) const {
    const auto& arr = is_value ? v_scale_[static_cast<size_t>(layer)] : k_scale_[static_cast<size_t>(layer)];
    // tile_offset counts elements of head_dim-long vectors; the scale array has one per vector.
    return const_cast<float*>(arr.data()) + layout_.tile_offset(block, head, slot) / layout_.head_dim;
  }
  int n_arrays() const { return layout_.latent ? 1 : 2; }  // K and V, or the latent rows only
  KvLayout layout_;
  int64_t elem_bytes_ = 4;
  bool scaled_ = false;
  int32_t group_ = 0;                               // effective channel group of the packed dtypes
  int64_t row_bytes_[2] = {0, 0};                   // [is_value] bytes of one slot in a tile
  int64_t tile_bytes_[2] = {0, 0};                  // [is_value] bytes of one (block, head) tile
  std::unordered_map<int64_t, Residual> residual_;  // KIVI: blocks being filled
  struct PendingTile {
    int32_t layer, block, head;
    bool is_value;
  };
  bool defer_ = false;
  std::vector<PendingTile> pending_;  // KIVI, deferring: full tiles not yet quantized
  int64_t residual_block_bytes_ = 0, peak_residual_bytes_ = 0;
  std::vector<KvBuffer> k_, v_;                        // [n_layer] each num_blocks * block bytes
  std::vector<std::vector<float>> k_scale_, v_scale_;  // [n_layer][block][kv_head][slot], scaled dtypes only
};

}  // namespace kvscope
