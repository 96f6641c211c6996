#include "cpu/cpu_kv_storage.h"

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "gguf/ggml_types.h"

namespace kvscope {

void CpuKvStorage::init(const KvLayout& layout) {
  layout_ = layout;
  elem_bytes_ = kv_bytes_per_head_vector(layout.dtype, 1);
  const int64_t per_layer = static_cast<int64_t>(layout.num_blocks) * layout.n_head_kv * layout.block_size *
                            layout.head_dim * elem_bytes_;
  k_.clear();
  v_.clear();
  try {
    k_.resize(static_cast<size_t>(layout.n_layer));
    v_.resize(static_cast<size_t>(layout.n_layer));
    for (int32_t l = 0; l < layout.n_layer; ++l) {
      k_[static_cast<size_t>(l)].assign(static_cast<size_t>(per_layer), 0);
      v_[static_cast<size_t>(l)].assign(static_cast<size_t>(per_layer), 0);
    }
  } catch (const std::bad_alloc&) {
    k_.clear();
    v_.clear();
    throw std::runtime_error("cannot allocate the KV cache: " + std::to_string(layout.total_bytes() >> 20) +
                             " MiB requested for " + std::to_string(layout.num_blocks) + " blocks");
  }
}

uint8_t* CpuKvStorage::tile_ptr(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot) const {
  const auto& arr = is_value ? v_[static_cast<size_t>(layer)] : k_[static_cast<size_t>(layer)];
  return const_cast<uint8_t*>(arr.data()) + layout_.tile_offset(block, head, slot) * elem_bytes_;
}

void CpuKvStorage::store(int32_t layer, bool is_value, int64_t slot, int32_t head, const float* x) {
  const int32_t block = static_cast<int32_t>(slot / layout_.block_size);
  const int32_t off = static_cast<int32_t>(slot % layout_.block_size);
  uint8_t* dst = tile_ptr(layer, is_value, block, head, off);
  const int32_t d = layout_.head_dim;
  switch (layout_.dtype) {
    case KvDtype::F32:
      std::memcpy(dst, x, sizeof(float) * static_cast<size_t>(d));
      break;
    case KvDtype::F16: {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int32_t i = 0; i < d; ++i) h[i] = fp32_to_fp16(x[i]);
      break;
    }
    case KvDtype::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int32_t i = 0; i < d; ++i) h[i] = fp32_to_bf16(x[i]);
      break;
    }
  }
}

const float* CpuKvStorage::load_tile(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t n,
                                     float* dst) const {
  const uint8_t* src = tile_ptr(layer, is_value, block, head, 0);
  const int64_t count = static_cast<int64_t>(n) * layout_.head_dim;
  switch (layout_.dtype) {
    case KvDtype::F32:
      return reinterpret_cast<const float*>(src);
    case KvDtype::F16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = fp16_to_fp32(h[i]);
      return dst;
    }
    case KvDtype::BF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_fp32(h[i]);
      return dst;
    }
  }
  return dst;
}

void CpuKvStorage::copy_block(int32_t src_block, int32_t dst_block, int32_t n_slots) {
  const size_t bytes = static_cast<size_t>(n_slots) * layout_.head_dim * elem_bytes_;
  for (int32_t l = 0; l < layout_.n_layer; ++l)
    for (int is_v = 0; is_v < 2; ++is_v)
      for (int32_t h = 0; h < layout_.n_head_kv; ++h)
        std::memcpy(tile_ptr(l, is_v, dst_block, h, 0), tile_ptr(l, is_v, src_block, h, 0), bytes);
}

}  // namespace kvscope
