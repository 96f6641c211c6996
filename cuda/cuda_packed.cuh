#pragma once
// Device access to the packed 4/2-bit KV tiles (int4, rot4, kivi4, kivi2): where a row lives,
// storing one head vector, reading one element. The math is kv_quant4_math.h's (host-tested
// against the CPU codecs); this header only adds the addressing of KvGeometry / KvArray.
#include "cuda_common.cuh"
#include "kv_quant4_math.h"

namespace kvscope::cuda {

namespace m4 = kvscope::kvq4math;

__device__ inline uint8_t* packed_tile(const KvGeometry& g, const KvArray& a, bool is_value, int32_t block,
                                       int32_t head) {
  return static_cast<uint8_t*>(a.data) + (static_cast<int64_t>(block) * g.n_head_kv + head) * g.tile_bytes[is_value];
}
__device__ inline uint16_t* residual_row(const KvGeometry& g, const KvArray& a, int32_t res_slot, int32_t head,
                                         int32_t slot) {
  return a.residual + res_slot * g.res_stride + (static_cast<int64_t>(head) * g.block_size + slot) * g.head_dim;
}

// Stores the head vector sv (shared memory, D floats; may be modified: rot4 rotates it in place)
// at (block, head, slot). Called by the whole thread block. int4/rot4: one thread encodes the
// row with the serial reference (a row is D <= 256 elements; the CPU runs the same loop).
// KIVI: the row goes to the f16 residual (res_slot), quantized when its block completes.
__device__ inline void packed_store_vector(float* sv, const KvGeometry& g, const KvArray& a, bool is_value,
                                           int32_t block, int32_t head, int32_t slot, int32_t res_slot) {
  const int32_t D = g.head_dim;
  __syncthreads();  // sv complete
  if (packed_kv_kivi(g.packed)) {
    uint16_t* dst = residual_row(g, a, res_slot, head, slot);
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x) dst[d] = m4::f32_to_f16_bits(sv[d]);
    return;
  }
  if (threadIdx.x == 0) {
    if (g.packed == PackedKv::ROT4) m4::rotate(sv, D);
    m4::encode_int4_row(sv, D, g.group, packed_tile(g, a, is_value, block, head) + slot * g.row_bytes[is_value]);
  }
  __syncthreads();  // sv may be reused by the caller
}

// Element e of the stored (block, head, slot) vector, dequantized (rot4: still in the rotated basis).
__device__ inline float packed_elem(const KvGeometry& g, const KvArray& a, bool is_value, int32_t block, int32_t head,
                                    int32_t slot, int32_t e) {
  const int32_t D = g.head_dim;
  const uint8_t* tile = packed_tile(g, a, is_value, block, head);
  if (!packed_kv_kivi(g.packed)) return m4::int4_row_value(tile + slot * g.row_bytes[is_value], D, g.group, e);
  const int32_t r = g.res_of_block[block];
  if (r >= 0) return m4::f16_bits_to_f32(residual_row(g, a, r, head, slot)[e]);
  const int32_t bits = packed_kv_bits(g.packed);
  if (!is_value)
    return m4::channel_value(tile, g.row_bytes[0], tile + g.block_size * g.row_bytes[0], bits, slot, e);
  return m4::asym_row_value(tile + slot * g.row_bytes[1], D, g.group, bits, e);
}

}  // namespace kvscope::cuda
