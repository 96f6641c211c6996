#pragma once
// Internal to gemm*.cpp: the data the micro-kernels read, and the kernels themselves.
//
// The kernels compute a tile of kRows weight rows x L tokens (L = 16 on AVX-512, 8 there for calls of <= 8 tokens and on AVX2)
// with the TOKENS IN THE VECTOR LANES: one load brings 4 activation bytes of each of L tokens,
// one broadcast brings 4 weight bytes of one row, and one vpdpbusd adds 4 * L products into the
// L int32 accumulators of that row. The integer sums are therefore exact per quant block for
// every (row, token) without any horizontal reduction, and the per-block float scaling runs
// once per block on a whole vector of tokens. Two inputs make that work:
//   TokenPanel  the converted activations (Q8_0 or Q8_K blocks, exactly ggml's rounding),
//               interleaved per call into tiles of L tokens (see block_bytes below);
//   RowTile     kRows weight rows, unpacked once per call from the GGUF blocks into one byte
//               per weight plus int/float scales; it stays in L1/L2 while every token tile of
//               the call streams past it, so the unpacking is paid once per row per call.
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"

namespace kvscope::gemm_detail {

// Panel layout for one tile of L tokens, per quant block (lanes are tokens; unused lanes are 0):
//   Q8_0 activations (block of 32):  qs [8 dwords][L][4 bytes], d f32[L], sum(qs) i32[L]
//   Q8_K activations (block of 256): qs [64 dwords][L][4 bytes], d f32[L],
//                                    (bs32[2p], bs32[2p+1]) i16 pairs [4][L] (bs32 = sums of 32),
//                                    (bsums[2p], bsums[2p+1]) i16 pairs [8][L] (sums of 16)
constexpr size_t q8_0_block_bytes(int lanes) { return static_cast<size_t>(lanes) * (32 + 4 + 4); }
constexpr size_t q8_k_block_bytes(int lanes) { return static_cast<size_t>(lanes) * (256 + 4 + 16 + 32); }

struct TokenPanel {
  const uint8_t* data = nullptr;
  size_t tile_bytes = 0;  // one tile of L tokens: n_blocks * block_bytes
  int64_t n_blocks = 0;   // quant blocks per activation row
  int lanes = 0;
};

// kRows weight rows unpacked (rows past the end of the matrix are zero-filled, never stored).
// Levels are one byte per weight, row-major (stride = K bytes):
//   AVX-512: unsigned, level + offset (Q8_0 / IQ4_NL / IQ4_XS / MXFP4: +128, Q4_0: +8, Q5_0: +16, Q6_K:
//            +32, Q3_K: +4, Q2_K / Q4_K: their stored unsigned values), the offset removed by
//            `offset_shift` (offset = 1 << shift) times the activation block (or sub-block) sums;
//   AVX2:    signed true levels for Q8_0/Q4_0/Q5_0/IQ4_NL/IQ4_XS/MXFP4, the other K-quants as above.
// Scales per row and block: d (f32 of the weight's f16 d), dmin (Q2_K, Q4_K), sc (one int32 per
// sub-block: 8 for Q4_K / IQ4_XS, 16 for Q2_K / Q3_K / Q6_K), pairs (int16 pairs in an int32,
// one per two sub-blocks, for madd with the activation sums: the mins of Q2_K / Q4_K, the scales
// of Q3_K / Q6_K / IQ4_XS, zero for IQ4_XS's signed AVX2 levels).
struct RowTile {
  const uint8_t* levels = nullptr;
  int64_t k = 0;                   // weights per row
  int64_t n_blocks = 0;            // quant blocks per row
  const float* d = nullptr;        // [row][block]
  const float* dmin = nullptr;     // [row][block]          Q2_K, Q4_K
  const int32_t* sc = nullptr;     // [row][block][8 | 16]  sub-blocks of 32 | 16
  const int32_t* pairs = nullptr;  // [row][block][4 | 8]   sub-blocks of 32 | 16
  int offset_shift = 0;
};

// One tile: y[t * ldy + r] for r < n_rows, t < n_tok (n_tok <= lanes) from one panel tile.
constexpr int kRowsAvx512 = 8;
constexpr int kRowsAvx2 = 4;
// lanes: 16 (zmm) or 8 (ymm); the panel must have been built for that many.
void tile_avx512_vnni(GgmlType type, const RowTile& w, const uint8_t* panel_tile, int64_t n_blocks, int lanes,
                      int n_rows, int n_tok, float* y, int64_t ldy);
void tile_avx2(GgmlType type, const RowTile& w, const uint8_t* panel_tile, int64_t n_blocks, int n_rows, int n_tok,
               float* y, int64_t ldy);

// The levels of one weight row (nb blocks of `type`) in the RowTile layout above (AVX2 code,
// used for both ISAs: signed_levels selects the AVX2 layout).
void unpack_levels(GgmlType type, const uint8_t* src, int64_t nb, bool signed_levels, uint8_t* out);

}  // namespace kvscope::gemm_detail
