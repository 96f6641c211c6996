#pragma once
// Shape of the KV block pool shared by every backend: per layer, keys and values are stored as
// [block][kv_head][slot_in_block][head_dim], so one (block, head) is a contiguous tile that the
// attention loop walks block by block through the block table.
#include <cstdint>
#include <span>
#include <string>

#include "kv/kv_dtype.h"

namespace kvscope {

// The block sizes (tokens per block) every allocator, backend and panel supports: the one list.
inline constexpr int32_t kBlockSizes[] = {8, 16, 32, 64, 128};
inline std::span<const int32_t> supported_block_sizes() { return kBlockSizes; }
inline bool is_supported_block_size(int32_t bs) {
  for (int32_t b : kBlockSizes)
    if (b == bs) return true;
  return false;
}
inline std::string block_size_choices() {  // "8, 16, 32, 64, 128"
  std::string s;
  for (int32_t b : kBlockSizes) s += (s.empty() ? "" : ", ") + std::to_string(b);
  return s;
}

struct KvLayout {
  int32_t n_layer = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  KvDtype dtype = KvDtype::F32;
  int32_t quant_group = 0;  // channel group of the packed (4/2-bit) dtypes; 0 = kDefaultKvGroup
  // KIVI only: a full block stays in the f16 residual until at least this many tokens of its
  // sequence follow it (0: quantized as soon as it is full). Not in bytes_per_token: the
  // residual is per sequence (CpuKvStorage::residual_bytes).
  int32_t kivi_residual = 0;
  // Latent attention (model_config.h MlaConfig): one row per token, key and value at once; there
  // is no V array. Only the per-vector dtypes (f32, f16, bf16, int8, fp8).
  bool latent = false;

  // Exact: codes, scales, zero points and padding (kv/kv_dtype.h), for every dtype.
  int64_t bytes_per_token() const {
    return static_cast<int64_t>(n_layer) * n_head_kv *
           (latent ? kv_bytes_per_head_vector(dtype, head_dim)
                   : kv_bytes_per_token_head(dtype, head_dim, block_size, quant_group));
  }
  int64_t bytes_per_block() const { return bytes_per_token() * block_size; }
  int64_t total_bytes() const { return bytes_per_block() * num_blocks; }
  // Element offset of (block, head, slot) inside one layer's K or V array (dtypes of whole bytes
  // per element; the packed ones use kv_row_bytes / kv_tile_extra_bytes, see cpu_kv_storage.h).
  int64_t tile_offset(int32_t block, int32_t head, int32_t slot_in_block) const {
    return ((static_cast<int64_t>(block) * n_head_kv + head) * block_size + slot_in_block) * head_dim;
  }
};

}  // namespace kvscope
