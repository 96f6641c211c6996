#pragma once
// Tensor element types as ggml numbers them in GGUF files, with their block layouts.
// The block structs are bit-exact copies of llama.cpp's layouts (ggml-common.h) so that
// weights can be read straight out of the mmapped file.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvscope {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

constexpr int QK8_0 = 32;
constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_1 = 32;
constexpr int QK_K = 256;
constexpr int QK4_NL = 32;
constexpr int K_SCALE_SIZE = 12;

// The 16 levels of IQ4_NL / IQ4_XS (ggml-common.h kvalues_iq4nl): a nibble indexes this table.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// The 16 levels of MXFP4 (ggml-common.h kvalues_mxfp4): the E2M1 values doubled, so that they are
// integers; the block scale is halved to match (e8m0_to_fp32_half).
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
constexpr int QK_MXFP4 = 32;

// Half of an E8M0 scale, 2^(e - 128), as ggml's GGML_E8M0_TO_FP32_HALF: exact for every byte
// (e < 2 lands in the subnormals). ggml never writes e = 255 (NaN); it reads as 2^127 here too.
constexpr float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

using ggml_half = uint16_t;  // IEEE binary16 bits

#pragma pack(push, 1)
struct BlockQ8_0 {
  ggml_half d;
  int8_t qs[QK8_0];
};  // 34 bytes
struct BlockQ4_0 {
  ggml_half d;
  uint8_t qs[QK4_0 / 2];
};  // 18 bytes
struct BlockQ4_1 {
  ggml_half d;
  ggml_half m;
  uint8_t qs[QK4_1 / 2];
};  // 20 bytes
struct BlockQ5_0 {
  ggml_half d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};  // 22 bytes
struct BlockQ5_1 {
  ggml_half d;
  ggml_half m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};  // 24 bytes
struct BlockQ8_1 {
  ggml_half d;
  ggml_half s;
  int8_t qs[QK8_1];
};  // 36 (activations only)
struct BlockQ2_K {
  uint8_t scales[QK_K / 16];  // low nibble: scale, high nibble: min, per 16 values
  uint8_t qs[QK_K / 4];       // 2-bit levels
  ggml_half d;
  ggml_half dmin;
};  // 84
struct BlockQ3_K {
  uint8_t hmask[QK_K / 8];  // third bit of each level (set: level as is, clear: level - 4)
  uint8_t qs[QK_K / 4];     // low 2 bits of the levels
  uint8_t scales[12];       // 16 six-bit scales, biased by 32
  ggml_half d;
};  // 110
struct BlockIQ4_NL {
  ggml_half d;
  uint8_t qs[QK4_NL / 2];  // indices into kIq4nlValues
};                         // 18
struct BlockIQ4_XS {
  ggml_half d;
  uint16_t scales_h;            // top 2 bits of the 8 six-bit scales (biased by 32)
  uint8_t scales_l[QK_K / 64];  // low 4 bits of the scales, two per byte
  uint8_t qs[QK_K / 2];         // indices into kIq4nlValues
};                              // 136
struct BlockMXFP4 {
  uint8_t e;                 // E8M0 block scale: 2^(e - 127)
  uint8_t qs[QK_MXFP4 / 2];  // indices into kMxfp4Values
};                           // 17
struct BlockQ4_K {
  ggml_half d;
  ggml_half dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};  // 144
struct BlockQ5_K {
  ggml_half d;
  ggml_half dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};  // 176
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  ggml_half d;
};  // 210
struct BlockQ8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};  // 292 (activations only)
#pragma pack(pop)
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

struct GgmlTypeInfo {
  const char* name;     // "f32", "q4_K", ... as llama.cpp prints them; "unknown" if not a ggml type
  int64_t block_elems;  // elements per block (1 for plain floats); 0 when unknown
  size_t block_bytes;   // bytes per block; 0 when unknown
  bool supported;       // kvscope can dequantize and multiply it
};

// Works for any raw value read from a file, including values ggml never defined.
GgmlTypeInfo ggml_type_info(uint32_t raw_type);
inline GgmlTypeInfo ggml_type_info(GgmlType t) { return ggml_type_info(static_cast<uint32_t>(t)); }
std::string ggml_type_name(uint32_t raw_type);  // "q6_K", or "unknown type 77"
bool ggml_type_supported(GgmlType t);

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers).
size_t ggml_row_bytes(GgmlType t, int64_t n);

// Half / bfloat conversion (IEEE round-to-nearest-even, like ggml's reference code).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round-to-nearest-even, NaN kept quiet (as ggml)

// The j-th (0..7) six-bit (scale, min) pair of a Q4_K/Q5_K block, unpacked from its 12 scale
// bytes (ggml's packing): the one copy the dequantizer, the quantizer and the dot products use.
inline void q4_k_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 16 six-bit scales of a Q3_K block (ggml's packing: low 4 bits in bytes 0-7, two per
// byte; top 2 bits in bytes 8-11), with the bias of 32 removed.
inline void q3_k_scales(const uint8_t* q, int8_t out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int lo = (q[j % 8] >> (4 * (j / 8))) & 0xF;
    const int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// The j-th (0..7) scale of an IQ4_XS block, bias of 32 removed.
inline int iq4_xs_scale(int j, const uint8_t* scales_l, uint16_t scales_h) {
  return (((scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((scales_h >> (2 * j)) & 3) << 4)) - 32;
}

// Dequantize n elements (a whole number of blocks) of type t into f32.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// Reference quantizers (as llama.cpp's *_ref functions): used by the GGUF writer for synthetic
// models and by the matmul to round activations to the weight's vec-dot type.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace kvscope
