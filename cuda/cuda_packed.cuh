#pragma once
// Device access to the packed 4/2-bit KV tiles (int4, rot4, kivi4, kivi2): where a row lives,
// storing one head vector, reading one element. The math is kv_quant4_math.h's (host-tested
// against the CPU codecs); this header only adds the addressing of KvGeometry / KvArray.
#include "cuda_common.cuh"
#include "kv_quant4_math.h"

namespace kvscope::cuda {

namespace m4 = kvscope::kvq4math;

__device__ inline m4::PackedGeom packed_geom(const KvGeometry& g) {
  m4::PackedGeom p;
  p.n_head_kv = g.n_head_kv, p.head_dim = g.head_dim, p.block_size = g.block_size, p.group = g.group;
  p.bits = packed_kv_bits(g.packed), p.kivi = packed_kv_kivi(g.packed), p.rot = g.packed == PackedKv::ROT4;
  for (int v = 0; v < 2; ++v) p.row_bytes[v] = g.row_bytes[v], p.tile_bytes[v] = g.tile_bytes[v];
  return p;
}
__device__ inline uint8_t* packed_tile(const KvGeometry& g, const KvArray& a, bool is_value, int32_t block,
                                       int32_t head) {
  return static_cast<uint8_t*>(a.data) + m4::tile_offset_bytes(packed_geom(g), is_value, block, head);
}
__device__ inline uint16_t* residual_row(const KvGeometry& g, const KvArray& a, int32_t res_slot, int32_t head,
                                         int32_t slot) {
  return a.residual + res_slot * g.res_stride + m4::residual_offset(packed_geom(g), head, slot);
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
  if (threadIdx.x == 0)
    m4::store_int4_row(packed_geom(g), sv, packed_tile(g, a, is_value, block, head), is_value, slot);
  __syncthreads();  // sv may be reused by the caller
}

// Element e of the stored (block, head, slot) vector, dequantized (rot4: still in the rotated basis).
__device__ inline float packed_elem(const KvGeometry& g, const KvArray& a, bool is_value, int32_t block, int32_t head,
                                    int32_t slot, int32_t e) {
  if (packed_kv_kivi(g.packed)) {
    const int32_t r = g.res_of_block[block];
    if (r >= 0) return m4::f16_bits_to_f32(residual_row(g, a, r, head, slot)[e]);
  }
  return m4::tile_value(packed_geom(g), packed_tile(g, a, is_value, block, head), is_value, slot, e);
}

}  // namespace kvscope::cuda
