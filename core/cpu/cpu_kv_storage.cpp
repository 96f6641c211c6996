#include "cpu/cpu_kv_storage.h"

#include <cstdio>
#include <cstring>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#include <new>
#include <stdexcept>
#include <string>

#include "gguf/ggml_types.h"
#include "kv/kv_quant.h"

namespace kvscope {

namespace {

// Attention dequantizes every visible tile once per query head, so decoding speed matters:
// FP8 and F16 go through tables built from the exact converters (kv/kv_quant.h, ggml_types),
// 256 and 65536 entries (llama.cpp keeps the same f16 table); BF16 is a shift.
struct DecodeTables {
  float e4m3[256], e5m2[256];
  std::vector<float> f16;
  DecodeTables() : f16(65536) {
    for (int c = 0; c < 256; ++c) {
      e4m3[c] = kvq::fp8_e4m3_to_f32(static_cast<uint8_t>(c));
      e5m2[c] = kvq::fp8_e5m2_to_f32(static_cast<uint8_t>(c));
    }
    for (uint32_t h = 0; h < 65536; ++h) f16[h] = fp16_to_fp32(static_cast<uint16_t>(h));
  }
};
const DecodeTables& tables() {
  static const DecodeTables t;
  return t;
}

void dequantize_fp8_rows(const float* table, const uint8_t* src, const float* scales, int32_t n, int32_t d, float* dst) {
  for (int32_t r = 0; r < n; ++r) {
    const float s = scales[r];
    const uint8_t* q = src + static_cast<int64_t>(r) * d;
    float* y = dst + static_cast<int64_t>(r) * d;
    for (int32_t i = 0; i < d; ++i) y[i] = table[q[i]] * s;
  }
}

}  // namespace

// MemAvailable from /proc/meminfo in bytes, or -1 when unknown (not Linux).
static int64_t memory_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", reinterpret_cast<long long*>(&kib)) == 1) break;
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

void CpuKvStorage::init(const KvLayout& layout) {
  // Linux overcommits: a pool larger than the machine would be "allocated" and then killed by
  // the OOM killer while being zeroed. Refuse it up front with a message instead.
  if (const int64_t avail = memory_available_bytes(); avail > 0 && layout.total_bytes() > avail)
    throw std::runtime_error("the KV pool needs " + std::to_string(layout.total_bytes() >> 20) + " MiB (" +
                             std::to_string(layout.num_blocks) + " blocks) but only " + std::to_string(avail >> 20) +
                             " MiB of memory are available: choose fewer blocks or a smaller --kv-memory");
  layout_ = layout;
  elem_bytes_ = kv_elem_bytes(layout.dtype);
  scaled_ = kv_dtype_scaled(layout.dtype);
  const int64_t vectors = static_cast<int64_t>(layout.num_blocks) * layout.n_head_kv * layout.block_size;
  const int64_t per_layer = vectors * layout.head_dim * elem_bytes_;
  k_.clear();
  v_.clear();
  k_scale_.clear();
  v_scale_.clear();
  try {
    k_.resize(static_cast<size_t>(layout.n_layer));
    v_.resize(static_cast<size_t>(layout.n_layer));
    for (int32_t l = 0; l < layout.n_layer; ++l) {
      k_[static_cast<size_t>(l)].assign(static_cast<size_t>(per_layer), 0);
      v_[static_cast<size_t>(l)].assign(static_cast<size_t>(per_layer), 0);
    }
    if (scaled_) {
      k_scale_.assign(static_cast<size_t>(layout.n_layer), std::vector<float>(static_cast<size_t>(vectors), 1.0f));
      v_scale_.assign(static_cast<size_t>(layout.n_layer), std::vector<float>(static_cast<size_t>(vectors), 1.0f));
    }
  } catch (const std::bad_alloc&) {
    k_.clear();
    v_.clear();
    k_scale_.clear();
    v_scale_.clear();
    throw std::runtime_error("cannot allocate the KV cache: " + std::to_string(layout.total_bytes() >> 20) +
                             " MiB requested for " + std::to_string(layout.num_blocks) + " blocks");
  }
}

int64_t CpuKvStorage::allocated_bytes() const {
  int64_t n = 0;
  for (size_t l = 0; l < k_.size(); ++l) n += static_cast<int64_t>(k_[l].size() + v_[l].size());
  for (size_t l = 0; l < k_scale_.size(); ++l)
    n += static_cast<int64_t>(sizeof(float) * (k_scale_[l].size() + v_scale_[l].size()));
  return n;
}

uint8_t* CpuKvStorage::tile_ptr(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot) const {
  const auto& arr = is_value ? v_[static_cast<size_t>(layer)] : k_[static_cast<size_t>(layer)];
  return const_cast<uint8_t*>(arr.data()) + layout_.tile_offset(block, head, slot) * elem_bytes_;
}

float* CpuKvStorage::scale_ptr(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot) const {
  const auto& arr = is_value ? v_scale_[static_cast<size_t>(layer)] : k_scale_[static_cast<size_t>(layer)];
  // tile_offset counts elements of head_dim-long vectors; the scale array has one per vector.
  return const_cast<float*>(arr.data()) + layout_.tile_offset(block, head, slot) / layout_.head_dim;
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
    case KvDtype::INT8:
      *scale_ptr(layer, is_value, block, head, off) = kvq::quantize_int8(x, d, reinterpret_cast<int8_t*>(dst));
      break;
    case KvDtype::FP8_E4M3:
      *scale_ptr(layer, is_value, block, head, off) = kvq::quantize_fp8_e4m3(x, d, dst);
      break;
    case KvDtype::FP8_E5M2:
      *scale_ptr(layer, is_value, block, head, off) = kvq::quantize_fp8_e5m2(x, d, dst);
      break;
  }
}

const float* CpuKvStorage::load_tile(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t n,
                                     float* dst) const {
  const uint8_t* src = tile_ptr(layer, is_value, block, head, 0);
  const int32_t d = layout_.head_dim;
  const int64_t count = static_cast<int64_t>(n) * d;
  const float* scales = scaled_ ? scale_ptr(layer, is_value, block, head, 0) : nullptr;
  switch (layout_.dtype) {
    case KvDtype::F32:
      return reinterpret_cast<const float*>(src);
    case KvDtype::F16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      int64_t i = 0;
#if defined(__F16C__)
      for (; i + 8 <= count; i += 8)  // hardware conversion: exact, like the table
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
#endif
      const float* t = tables().f16.data();
      for (; i < count; ++i) dst[i] = t[h[i]];
      return dst;
    }
    case KvDtype::BF16: {
      const auto* h = reinterpret_cast<const uint16_t*>(src);
      auto* out = reinterpret_cast<uint32_t*>(dst);  // bf16 is the top half of an f32
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<uint32_t>(h[i]) << 16;
      return dst;
    }
    case KvDtype::INT8:
      for (int32_t r = 0; r < n; ++r)
        kvq::dequantize_int8(reinterpret_cast<const int8_t*>(src) + r * d, d, scales[r], dst + static_cast<int64_t>(r) * d);
      return dst;
    case KvDtype::FP8_E4M3:
      dequantize_fp8_rows(tables().e4m3, src, scales, n, d, dst);
      return dst;
    case KvDtype::FP8_E5M2:
      dequantize_fp8_rows(tables().e5m2, src, scales, n, d, dst);
      return dst;
  }
  return dst;
}

void CpuKvStorage::copy_block(int32_t src_block, int32_t dst_block, int32_t n_slots) {
  const size_t bytes = static_cast<size_t>(n_slots) * layout_.head_dim * elem_bytes_;
  for (int32_t l = 0; l < layout_.n_layer; ++l)
    for (int is_v = 0; is_v < 2; ++is_v)
      for (int32_t h = 0; h < layout_.n_head_kv; ++h) {
        std::memcpy(tile_ptr(l, is_v, dst_block, h, 0), tile_ptr(l, is_v, src_block, h, 0), bytes);
        if (scaled_)
          std::memcpy(scale_ptr(l, is_v, dst_block, h, 0), scale_ptr(l, is_v, src_block, h, 0),
                      sizeof(float) * static_cast<size_t>(n_slots));
      }
}

void CpuKvStorage::prefetch_tile(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t n) const {
  const uint8_t* p = tile_ptr(layer, is_value, block, head, 0);
  const int64_t bytes = static_cast<int64_t>(n) * layout_.head_dim * kv_bytes_per_head_vector(layout_.dtype, 1);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
}

}  // namespace kvscope
