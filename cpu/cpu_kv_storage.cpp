#include "cpu/cpu_kv_storage.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#include <new>
#include <stdexcept>
#include <string>
#if defined(__linux__)
#include <sys/mman.h>
#endif

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

}  // namespace

KvBuffer::KvBuffer(size_t n) : bytes(n) {
  // Below one huge page the hint would only inflate a small pool to 2 MiB per array.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = n >= kHuge ? kHuge : 64;
  const size_t padded = std::max(align, (n + align - 1) / align * align);  // aligned_alloc wants a multiple
  mem.reset(static_cast<uint8_t*>(std::aligned_alloc(align, padded)));
  if (!mem) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (align == kHuge) madvise(mem.get(), padded, MADV_HUGEPAGE);  // a hint: without THP it is plain memory
#endif
  std::memset(mem.get(), 0, n);
}

void KvBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

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
  if (const std::string why = kv_format_problem(layout.dtype, layout.head_dim, layout.block_size, layout.quant_group);
      !why.empty())
    throw std::invalid_argument(why);
  if (layout.latent && kv_dtype_packed(layout.dtype)) throw std::invalid_argument(latent_packed_problem(layout.dtype));
  layout_ = layout;
  elem_bytes_ = kv_elem_bytes(layout.dtype);
  scaled_ = kv_dtype_scaled(layout.dtype);
  group_ = kv_effective_group(layout.quant_group, layout.head_dim);
  for (bool v : {false, true}) {
    if (v && layout.latent) {  // no V array: the value is the key row
      row_bytes_[v] = tile_bytes_[v] = 0;
      continue;
    }
    row_bytes_[v] = kv_row_bytes(layout.dtype, v, layout.head_dim, layout.quant_group);
    tile_bytes_[v] =
        row_bytes_[v] * layout.block_size + kv_tile_extra_bytes(layout.dtype, v, layout.head_dim, layout.block_size);
  }
  residual_.clear();
  pending_.clear();
  residual_block_bytes_ = static_cast<int64_t>(layout.n_head_kv) *
                          kv_residual_bytes_per_block_head(layout.dtype, layout.head_dim, layout.block_size);
  peak_residual_bytes_ = 0;
  const int64_t vectors = static_cast<int64_t>(layout.num_blocks) * layout.n_head_kv * layout.block_size;
  const int64_t tiles = static_cast<int64_t>(layout.num_blocks) * layout.n_head_kv;
  const int64_t per_layer_k = tiles * tile_bytes_[0], per_layer_v = tiles * tile_bytes_[1];
  k_.clear();
  v_.clear();
  k_scale_.clear();
  v_scale_.clear();
  try {
    for (int32_t l = 0; l < layout.n_layer; ++l) {
      k_.emplace_back(static_cast<size_t>(per_layer_k));
      v_.emplace_back(static_cast<size_t>(per_layer_v));
    }
    if (scaled_) {
      k_scale_.assign(static_cast<size_t>(layout.n_layer), std::vector<float>(static_cast<size_t>(vectors), 1.0f));
      v_scale_.assign(static_cast<size_t>(layout.n_layer),
                      std::vector<float>(static_cast<size_t>(layout.latent ? 0 : vectors), 1.0f));
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

float kv_encode_vector(KvDtype dtype, const float* x, int32_t d, uint8_t* dst) {
  switch (dtype) {
    case KvDtype::F32:
      std::memcpy(dst, x, sizeof(float) * static_cast<size_t>(d));
      return 1.0f;
    case KvDtype::F16: {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int32_t i = 0; i < d; ++i) h[i] = fp32_to_fp16(x[i]);
      return 1.0f;
    }
    case KvDtype::BF16: {
      auto* h = reinterpret_cast<uint16_t*>(dst);
      for (int32_t i = 0; i < d; ++i) h[i] = fp32_to_bf16(x[i]);
      return 1.0f;
    }
    case KvDtype::INT8:
      return kvq::quantize_int8(x, d, reinterpret_cast<int8_t*>(dst));
    case KvDtype::FP8_E4M3:
      return kvq::quantize_fp8_e4m3(x, d, dst);
    case KvDtype::FP8_E5M2:
      return kvq::quantize_fp8_e5m2(x, d, dst);
    case KvDtype::INT4:
    case KvDtype::KIVI4:
    case KvDtype::KIVI2:
    case KvDtype::ROT4:
    case KvDtype::ROT4C:
      break;  // tile formats: CpuKvStorage::store_packed
  }
  throw std::invalid_argument(std::string("kv_encode_vector: ") + kv_dtype_name(dtype) +
                              " is stored per tile, not per vector (only the paged KV pool stores it)");
}

namespace {

void decode_f16_row(const uint16_t* h, int32_t d, float* dst) {
  int32_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= d; i += 8)  // hardware conversion: exact, like the table
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
#endif
  const float* t = tables().f16.data();
  for (; i < d; ++i) dst[i] = t[h[i]];
}

}  // namespace

void kv_decode_vectors(KvDtype dtype, const uint8_t* src, int64_t src_stride, const float* scales, int64_t scale_stride,
                       int32_t n, int32_t d, float* dst) {
  // The switch sits outside the row loop: one branch per call, none per vector or element.
  switch (dtype) {
    case KvDtype::F32:
      for (int32_t r = 0; r < n; ++r)
        std::memcpy(dst + static_cast<int64_t>(r) * d, src + r * src_stride, sizeof(float) * static_cast<size_t>(d));
      return;
    case KvDtype::F16:
      for (int32_t r = 0; r < n; ++r)
        decode_f16_row(reinterpret_cast<const uint16_t*>(src + r * src_stride), d, dst + static_cast<int64_t>(r) * d);
      return;
    case KvDtype::BF16:
      for (int32_t r = 0; r < n; ++r) {
        const auto* h = reinterpret_cast<const uint16_t*>(src + r * src_stride);
        auto* out = reinterpret_cast<uint32_t*>(dst + static_cast<int64_t>(r) * d);  // bf16 is the top half of an f32
        for (int32_t i = 0; i < d; ++i) out[i] = static_cast<uint32_t>(h[i]) << 16;
      }
      return;
    case KvDtype::INT8:
      for (int32_t r = 0; r < n; ++r)
        kvq::dequantize_int8(reinterpret_cast<const int8_t*>(src + r * src_stride), d, scales[r * scale_stride],
                             dst + static_cast<int64_t>(r) * d);
      return;
    case KvDtype::FP8_E4M3:
    case KvDtype::FP8_E5M2: {
      const float* table = dtype == KvDtype::FP8_E4M3 ? tables().e4m3 : tables().e5m2;
      for (int32_t r = 0; r < n; ++r) {
        const float s = scales[r * scale_stride];
        const uint8_t* q = src + r * src_stride;
        float* y = dst + static_cast<int64_t>(r) * d;
        for (int32_t i = 0; i < d; ++i) y[i] = table[q[i]] * s;
      }
      return;
    }
    case KvDtype::INT4:
    case KvDtype::KIVI4:
    case KvDtype::KIVI2:
    case KvDtype::ROT4:
    case KvDtype::ROT4C:
      break;
  }
  throw std::invalid_argument(std::string("kv_decode_vectors: ") + kv_dtype_name(dtype) +
                              " is stored per tile, not per vector (only the paged KV pool reads it)");
}

void CpuKvStorage::store(int32_t layer, bool is_value, int64_t slot, int32_t head, const float* x) {
  if (is_value && layout_.latent) throw std::logic_error("a latent KV cache has no value rows to store");
  const int32_t block = static_cast<int32_t>(slot / layout_.block_size);
  const int32_t off = static_cast<int32_t>(slot % layout_.block_size);
  if (kv_dtype_packed(layout_.dtype)) return store_packed(layer, is_value, block, off, head, x);
  const float s = kv_encode_vector(layout_.dtype, x, layout_.head_dim, tile_ptr(layer, is_value, block, head, off));
  if (scaled_) *scale_ptr(layer, is_value, block, head, off) = s;
}

const float* CpuKvStorage::decode_rows(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot,
                                       int32_t n, float* dst) const {
  if (kv_dtype_packed(layout_.dtype)) {
    decode_packed(layer, is_value, block, head, slot, n, dst);
    return dst;
  }
  const uint8_t* src = tile_ptr(layer, is_value, block, head, slot);
  const int32_t d = layout_.head_dim;
  kv_decode_vectors(layout_.dtype, src, static_cast<int64_t>(d) * elem_bytes_,
                    scaled_ ? scale_ptr(layer, is_value, block, head, slot) : nullptr, 1, n, d, dst);
  return dst;
}

void CpuKvStorage::copy_block(int32_t src_block, int32_t dst_block, int32_t n_slots) {
  const bool packed = kv_dtype_packed(layout_.dtype);
  for (int32_t l = 0; l < layout_.n_layer; ++l)
    for (int is_v = 0; is_v < n_arrays(); ++is_v)
      for (int32_t h = 0; h < layout_.n_head_kv; ++h) {
        // Packed tiles go whole: KIVI keys' per-channel parameters sit after the rows.
        const size_t bytes = static_cast<size_t>(packed ? tile_bytes_[is_v] : n_slots * row_bytes_[is_v]);
        std::memcpy(tile_ptr(l, is_v, dst_block, h, 0), tile_ptr(l, is_v, src_block, h, 0), bytes);
        if (scaled_)
          std::memcpy(scale_ptr(l, is_v, dst_block, h, 0), scale_ptr(l, is_v, src_block, h, 0),
                      sizeof(float) * static_cast<size_t>(n_slots));
      }
  if (kv_dtype_block_quantized(layout_.dtype))
    for (int32_t l = 0; l < layout_.n_layer; ++l) copy_residual(l, src_block, dst_block);
}

void CpuKvStorage::copy_slot(int64_t src_slot, int64_t dst_slot) {
  if (kv_dtype_block_quantized(layout_.dtype))
    throw std::invalid_argument(std::string(kv_dtype_name(layout_.dtype)) +
                                " blocks cannot move single slots (keys are quantized per block)");
  const int64_t bs = layout_.block_size;
  const auto sb = static_cast<int32_t>(src_slot / bs), so = static_cast<int32_t>(src_slot % bs);
  const auto db = static_cast<int32_t>(dst_slot / bs), dof = static_cast<int32_t>(dst_slot % bs);
  for (int32_t l = 0; l < layout_.n_layer; ++l)
    for (int is_v = 0; is_v < n_arrays(); ++is_v)
      for (int32_t h = 0; h < layout_.n_head_kv; ++h) {
        std::memmove(tile_ptr(l, is_v, db, h, dof), tile_ptr(l, is_v, sb, h, so),
                     static_cast<size_t>(row_bytes_[is_v]));
        if (scaled_) *scale_ptr(l, is_v, db, h, dof) = *scale_ptr(l, is_v, sb, h, so);
      }
}

}  // namespace kvscope
