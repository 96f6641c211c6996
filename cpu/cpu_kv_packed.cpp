// CpuKvStorage's store and decode for the packed 4/2-bit dtypes (int4, rot4, rot4c, kivi4, kivi2):
// codecs in cpu/kv_quant4.h, tile geometry in kv/kv_dtype.h, the KIVI residual in cpu_kv_storage.h.
#include <algorithm>
#include <cstring>

#include "cpu/cpu_kv_storage.h"
#include "gguf/ggml_types.h"
#include "cpu/kv_quant4.h"

namespace kvscope {

void CpuKvStorage::store_packed(int32_t layer, bool is_value, int32_t block, int32_t off, int32_t head,
                                const float* x) {
  const int32_t d = layout_.head_dim;
  const KvDtype t = layout_.dtype;
  float rotated[512];         // head_dim <= 512 (kv_format_problem)
  if (kv_dtype_rotated(t)) {  // rot4, rot4c: stored as R x
    std::copy(x, x + d, rotated);
    kvq4::rotate(rotated, d);
    x = rotated;
  }
  if (t == KvDtype::INT4 || t == KvDtype::ROT4)
    return kvq4::encode_int4_row(x, d, group_, tile_ptr(layer, is_value, block, head, off));
  // KIVI and rot4c: into the f16 residual; the block is quantized when its last slot arrives.
  const int32_t bs = layout_.block_size, tiles = 2 * layout_.n_head_kv;
  auto [it, fresh] = residual_.try_emplace(residual_key(layer, block));
  Residual& r = it->second;
  if (fresh) {
    r.rows.assign(static_cast<size_t>(tiles) * bs * d, 0);
    r.done.assign(static_cast<size_t>(tiles), 0);
    peak_residual_bytes_ = std::max(peak_residual_bytes_, residual_bytes());
  }
  const size_t tile = static_cast<size_t>(is_value) * layout_.n_head_kv + head;
  if (off == 0 && r.done[tile]) {  // the block was reused: a new fill starts
    r.done[tile] = 0;
    --r.n_done;
  }
  uint16_t* row = residual_rows(r, is_value, head) + static_cast<int64_t>(off) * d;
  for (int32_t i = 0; i < d; ++i) row[i] = fp32_to_fp16(x[i]);
  if (off != bs - 1 || layout_.kivi_residual > 0) return;  // R > 0: complete_block decides when
  if (defer_) return pending_.push_back({layer, block, head, is_value});
  complete_tile(layer, is_value, block, head, r);
  if (r.n_done == tiles) residual_.erase(it);
}

void CpuKvStorage::complete_deferred(int32_t layer) {
  const int32_t tiles = 2 * layout_.n_head_kv;
  size_t kept = 0;
  for (const PendingTile& p : pending_) {
    if (p.layer != layer) {
      pending_[kept++] = p;
      continue;
    }
    const auto it = residual_.find(residual_key(p.layer, p.block));
    if (it == residual_.end() || it->second.done[static_cast<size_t>(p.is_value) * layout_.n_head_kv + p.head])
      continue;
    complete_tile(p.layer, p.is_value, p.block, p.head, it->second);
    if (it->second.n_done == tiles) residual_.erase(it);
  }
  pending_.resize(kept);
}

void CpuKvStorage::complete_block(int32_t layer, int32_t block) {
  const auto it = residual_.find(residual_key(layer, block));
  if (it == residual_.end()) return;
  for (int is_v = 0; is_v < 2; ++is_v)
    for (int32_t h = 0; h < layout_.n_head_kv; ++h)
      if (!it->second.done[static_cast<size_t>(is_v) * layout_.n_head_kv + h])
        complete_tile(layer, is_v, block, h, it->second);
  residual_.erase(it);
}

void CpuKvStorage::release_block(int32_t block) {
  for (int32_t l = 0; l < layout_.n_layer; ++l) residual_.erase(residual_key(l, block));
}

// The block's last slot is in: quantize it from the f16 residual. KIVI: keys per channel over
// the block's tokens, values per token. rot4c (rows already rotated): keys centered on the
// block's mean, then every row with fitted per-group scales.
void CpuKvStorage::complete_tile(int32_t layer, bool is_value, int32_t block, int32_t head, Residual& r) {
  const int32_t d = layout_.head_dim, bs = layout_.block_size, bits = kv_code_bits(layout_.dtype);
  std::vector<float> rows(static_cast<size_t>(bs) * d);
  kvq4::decode_f16_rows(residual_rows(r, is_value, head), bs, d, rows.data());
  uint8_t* base = tile_ptr(layer, is_value, block, head, 0);
  if (layout_.dtype == KvDtype::ROT4C) {
    if (!is_value) kvq4::center_rows(rows.data(), bs, d, base + bs * row_bytes_[0]);
    for (int32_t s = 0; s < bs; ++s)
      kvq4::encode_int4_row_fitted(rows.data() + static_cast<int64_t>(s) * d, d, group_,
                                   base + s * row_bytes_[is_value]);
  } else if (!is_value) {
    kvq4::encode_channel_tile(rows.data(), bs, d, bits, base, row_bytes_[0], base + bs * row_bytes_[0]);
  } else {
    for (int32_t s = 0; s < bs; ++s)
      kvq4::encode_asym_row(rows.data() + static_cast<int64_t>(s) * d, d, group_, bits, base + s * row_bytes_[1]);
  }
  r.done[static_cast<size_t>(is_value) * layout_.n_head_kv + head] = 1;
  ++r.n_done;
}

bool CpuKvStorage::in_residual(int32_t layer, bool is_value, int32_t block, int32_t head) const {
  const auto it = residual_.find(residual_key(layer, block));
  return it != residual_.end() && !it->second.done[static_cast<size_t>(is_value) * layout_.n_head_kv + head];
}

void CpuKvStorage::decode_packed(int32_t layer, bool is_value, int32_t block, int32_t head, int32_t slot, int32_t n,
                                 float* dst) const {
  const int32_t d = layout_.head_dim;
  const KvDtype t = layout_.dtype;
  if (t == KvDtype::INT4 || t == KvDtype::ROT4) {  // rot4 rows stay rotated: attention works in that basis
    kvq4::decode_int4_rows(tile_ptr(layer, is_value, block, head, slot), row_bytes_[is_value], n, d, group_, dst);
    return;
  }
  const int32_t bits = kv_code_bits(t);
  if (const auto it = residual_.find(residual_key(layer, block));
      it != residual_.end() && !it->second.done[static_cast<size_t>(is_value) * layout_.n_head_kv + head]) {
    auto& r = const_cast<Residual&>(it->second);  // residual_rows hands out a mutable pointer; only read here
    kvq4::decode_f16_rows(residual_rows(r, is_value, head) + static_cast<int64_t>(slot) * d, n, d, dst);
    return;
  }
  if (t == KvDtype::ROT4C) {  // rotated basis, as rot4; keys get their block's center back
    const uint8_t* base = tile_ptr(layer, is_value, block, head, 0);
    if (is_value) return kvq4::decode_int4_rows(base + slot * row_bytes_[1], row_bytes_[1], n, d, group_, dst);
    kvq4::decode_int4_rows_centered(base + slot * row_bytes_[0], row_bytes_[0], n, d, group_,
                                    base + layout_.block_size * row_bytes_[0], dst);
    return;
  }
  if (!is_value) {
    const uint8_t* base = tile_ptr(layer, false, block, head, 0);
    kvq4::decode_channel_rows(base + slot * row_bytes_[0], row_bytes_[0], base + layout_.block_size * row_bytes_[0], n,
                              d, bits, dst);
    return;
  }
  kvq4::decode_asym_rows(tile_ptr(layer, true, block, head, slot), row_bytes_[1], n, d, group_, bits, dst);
}

// A block copy (copy on write of a partly filled block) takes the residual along; a copy of a
// full block leaves none at the destination.
void CpuKvStorage::copy_residual(int32_t layer, int32_t src_block, int32_t dst_block) {
  const auto src = residual_.find(residual_key(layer, src_block));
  if (src == residual_.end()) {
    residual_.erase(residual_key(layer, dst_block));
    return;
  }
  Residual copy = src->second;
  residual_[residual_key(layer, dst_block)] = std::move(copy);
  peak_residual_bytes_ = std::max(peak_residual_bytes_, residual_bytes());
}

}  // namespace kvscope
