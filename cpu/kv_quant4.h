#pragma once
// Codecs of the sub-byte KV formats (int4, rot4, kivi4, kivi2; kv/kv_dtype.h says which layout
// each uses). Scales and minimums are f16, codes are packed little-end first: element i of a row
// sits in byte i*bits/8 at bit (i*bits)%8. Every encoder computes its codes with the f16-rounded
// parameters it stores, so decode(encode(x)) is within half a quantization step of x (plus the
// clamp when the f16 scale rounded down), the bound tests/cpu/test_kv_quant4.cpp checks.
#include <cstdint>

namespace kvscope::kvq4 {

constexpr int32_t kInt4Max = 7;  // symmetric int4 codes -7..7, stored as code + 8

// The fixed orthogonal rotation of rot4: R = H D / sqrt(d), D a diagonal of pseudo-random signs
// (a fixed seed: every process and backend uses the same matrix), H the Walsh-Hadamard matrix
// (fast transform, d log d). d must be a power of two.
void rotate(float* x, int32_t d);    // x <- R x
void unrotate(float* x, int32_t d);  // x <- R^T x (= R^-1 x)
float rotation_sign(int32_t i);      // D's i-th entry, +1 or -1

// Symmetric 4-bit, one f16 scale per group of g channels. row: [d/2 code bytes][d/g f16 scales].
void encode_int4_row(const float* x, int32_t d, int32_t g, uint8_t* row);
void decode_int4_row(const uint8_t* row, int32_t d, int32_t g, float* y);
// The same row format with each group's scale fitted (rot4c): of the scales +-amax/r, r = 7 to
// 10 in steps of 1/4, the one whose codes (-8..7: the 16th level int4 leaves unused) give the
// least squared error. r = +7 is encode_int4_row's scale with the same codes, so the error is
// never larger than its. Decodes with decode_int4_row(s).
void encode_int4_row_fitted(const float* x, int32_t d, int32_t g, uint8_t* row);

// rot4c's key centering over the n rows x[n][d] of a block: the per-channel mean, stored as d
// f16 values at `center`, is subtracted from every row as stored (f16-rounded), so decoding adds
// back exactly what was taken away.
void center_rows(float* x, int32_t n, int32_t d, uint8_t* center);
void add_center(const uint8_t* center, int32_t n, int32_t d, float* y);  // y[n][d] += center
// decode_int4_rows, then add_center (rot4c's keys); with AVX-512 in one pass, the center added
// before each store.
void decode_int4_rows_centered(const uint8_t* rows, int64_t stride, int32_t n, int32_t d, int32_t g,
                               const uint8_t* center, float* y);

// Asymmetric `bits`-bit (4 or 2) per token, f16 scale and f16 min per group of g channels (KIVI's
// values). row: [d*bits/8 code bytes][d/g x (f16 scale, f16 min)].
void encode_asym_row(const float* x, int32_t d, int32_t g, int32_t bits, uint8_t* row);
void decode_asym_row(const uint8_t* row, int32_t d, int32_t g, int32_t bits, float* y);

// Asymmetric `bits`-bit per channel over the n rows x[n][d] of a block (KIVI's keys): codes of
// row r at codes + r * code_stride (d*bits/8 bytes), params: d x (f16 scale, f16 min).
void encode_channel_tile(const float* x, int32_t n, int32_t d, int32_t bits, uint8_t* codes, int64_t code_stride,
                         uint8_t* params);
// Rows [0, n) of such a tile as f32 y[n][d] (codes points at the first wanted row).
void decode_channel_rows(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n, int32_t d,
                         int32_t bits, float* y);

// n rows of a tile at once (row r at rows + r * stride, decoded to y + r * d): the decoders
// above, with the CPU dispatch done once for the n rows.
void decode_int4_rows(const uint8_t* rows, int64_t stride, int32_t n, int32_t d, int32_t g, float* y);
void decode_asym_rows(const uint8_t* rows, int64_t stride, int32_t n, int32_t d, int32_t g, int32_t bits, float* y);

// f16 rows (the KIVI residual) to f32.
void decode_f16_rows(const uint16_t* h, int32_t n, int32_t d, float* y);

// The scalar references of the four decoders above (the tests hold the AVX2 forms to them, bit
// for bit: y = fma(code, scale, min) in both).
void decode_int4_row_scalar(const uint8_t* row, int32_t d, int32_t g, float* y);
void decode_asym_row_scalar(const uint8_t* row, int32_t d, int32_t g, int32_t bits, float* y);
void decode_channel_rows_scalar(const uint8_t* codes, int64_t code_stride, const uint8_t* params, int32_t n, int32_t d,
                                int32_t bits, float* y);
void decode_f16_rows_scalar(const uint16_t* h, int32_t n, int32_t d, float* y);

}  // namespace kvscope::kvq4
