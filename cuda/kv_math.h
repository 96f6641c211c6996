#pragma once
// Arithmetic shared by the CUDA kernels and the host: KV element codecs (fp8 e4m3 / e5m2, int8
// with a scale), slot addressing in the paged KV pool, RoPE angles, the visible-position set of
// a query under a sliding window with sinks, and block-table walking.
//
// Every function is `KVSCOPE_HD inline`: __host__ __device__ under nvcc, plain inline under a
// host compiler, so tests/test_cuda_host_math.cpp checks the very code the kernels run. No CUDA
// header is needed; the host side uses <cmath> (pow, nearbyint) and <cstring> (memcpy).
//
// FP8 conventions (OCP 8-bit floating point, v1.0):
//  * E4M3 ("e4m3fn"): bias 7, no infinities, max finite 448 (S.1111.110), NaN = S.1111.111,
//    subnormals m * 2^-9. Encoding rounds to nearest, ties to even.
//  * E5M2: IEEE-like, bias 15, max finite 57344 (S.11110.11), inf = S.11111.00, NaN =
//    S.11111.{01,10,11} (we emit .11), subnormals m * 2^-16. Round to nearest, ties to even.
//  * Saturation (Fp8Overflow::Saturate, as PTX cvt.satfinite and vLLM do): finite values that
//    round beyond the max finite, and +-inf, become +-max finite. Fp8Overflow::Ieee: overflow and
//    inf become inf (E5M2) or NaN (E4M3, which has no inf). NaN stays NaN (sign kept).
//    The KV cache uses the CPU backend's rules (core/kv/kv_quant.h): E4M3 saturates, E5M2 is
//    IEEE. With scale = absmax / qmax no stored value can overflow, so this only matters at the
//    converters' edges. Both encoders were checked bit for bit against CUDA's cuda_fp8.h
//    (__nv_cvt_float_to_fp8, both saturation modes) over all 2^32 f32 bit patterns but NaNs
//    (cuda/tools/fp8_exhaustive_check.cpp).
//  * Quantized KV stores one f32 scale per (token, kv head) vector: scale = absmax / qmax
//    (qmax 127 for int8, 448 for e4m3, 57344 for e5m2), 1 when the vector is all zero; code =
//    encode(x / scale); value = decode(code) * scale.
#include <cmath>
#include <cstdint>
#include <cstring>

#ifndef KVSCOPE_HD  // core/kv/kv_quant.h defines the same macro the same way
#if defined(__CUDACC__)
#define KVSCOPE_HD __host__ __device__
#else
#define KVSCOPE_HD
#endif
#endif

namespace kvscope::kvmath {

// ---- bit helpers -------------------------------------------------------------------------

KVSCOPE_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

KVSCOPE_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Round to nearest integer, ties to even (the default IEEE mode on both sides).
KVSCOPE_HD inline float round_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

KVSCOPE_HD inline bool is_nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }
KVSCOPE_HD inline bool is_inf_bits(uint32_t u) { return (u & 0x7FFFFFFFu) == 0x7F800000u; }

KVSCOPE_HD inline int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

// ---- FP8 ---------------------------------------------------------------------------------

enum class Fp8Overflow : int { Saturate, Ieee };

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;
constexpr float kInt8Max = 127.0f;

KVSCOPE_HD inline float fp8_e4m3_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xFu, m = b & 0x7u;
  if (e == 0xFu && m == 0x7u) return f32_from_bits(sign | 0x7FC00000u);             // NaN
  if (e == 0) return f32_from_bits(sign | f32_bits(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return f32_from_bits(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

KVSCOPE_HD inline uint8_t f32_to_fp8_e4m3(float x, Fp8Overflow mode = Fp8Overflow::Saturate) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (is_nan_bits(u)) return sign | 0x7Fu;
  if (a == 0x7F800000u) return mode == Fp8Overflow::Saturate ? (sign | 0x7Eu) : (sign | 0x7Fu);
  if (a < 0x3C800000u) {  // |x| < 2^-6: subnormal range, quantum 2^-9 (q == 8 is the min normal)
    const float q = round_even(f32_from_bits(a) * 512.0f);
    return sign | static_cast<uint8_t>(q);
  }
  // Normal: keep 3 mantissa bits, round the 20 dropped bits to nearest even; a carry moves into
  // the exponent as it should. Then rebias 127 -> 7.
  const uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  const uint32_t code = r - ((127u - 7u) << 3);
  if (r > ((127u - 7u) << 3) + 0x7Eu) return mode == Fp8Overflow::Saturate ? (sign | 0x7Eu) : (sign | 0x7Fu);
  return sign | static_cast<uint8_t>(code);
}

KVSCOPE_HD inline float fp8_e5m2_to_f32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 2) & 0x1Fu, m = b & 0x3u;
  if (e == 0x1Fu) return f32_from_bits(sign | (m == 0 ? 0x7F800000u : 0x7FC00000u));  // inf / NaN
  if (e == 0) return f32_from_bits(sign | f32_bits(static_cast<float>(m) * 1.52587890625e-05f));  // m * 2^-16
  return f32_from_bits(sign | ((e - 15u + 127u) << 23) | (m << 21));
}

KVSCOPE_HD inline uint8_t f32_to_fp8_e5m2(float x, Fp8Overflow mode = Fp8Overflow::Saturate) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (is_nan_bits(u)) return sign | 0x7Fu;
  if (a == 0x7F800000u) return mode == Fp8Overflow::Saturate ? (sign | 0x7Bu) : (sign | 0x7Cu);
  if (a < 0x38800000u) {  // |x| < 2^-14: subnormal range, quantum 2^-16 (q == 4 is the min normal)
    const float q = round_even(f32_from_bits(a) * 65536.0f);
    return sign | static_cast<uint8_t>(q);
  }
  const uint32_t r = (a + 0xFFFFFu + ((a >> 21) & 1u)) >> 21;
  const uint32_t code = r - ((127u - 15u) << 2);
  if (r > ((127u - 15u) << 2) + 0x7Bu) return mode == Fp8Overflow::Saturate ? (sign | 0x7Bu) : (sign | 0x7Cu);
  return sign | static_cast<uint8_t>(code);
}

// ---- int8 and the per-vector scale ----------------------------------------------------------

// Scale of one head vector whose largest |x| is absmax, for a code range of +-qmax.
KVSCOPE_HD inline float kv_quant_scale(float absmax, float qmax) { return absmax > 0.0f ? absmax / qmax : 1.0f; }

// Symmetric int8: round(x / scale) to nearest even, clamped to [-127, 127] (-128 unused).
KVSCOPE_HD inline int8_t f32_to_int8(float x, float scale) {
  float q = round_even(x / scale);
  if (q != q) return 0;  // NaN input
  q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
  return static_cast<int8_t>(q);
}
KVSCOPE_HD inline float int8_to_f32(int8_t q, float scale) { return static_cast<float>(q) * scale; }

// ---- slot addressing (must agree with KvLayout) ----------------------------------------------

KVSCOPE_HD inline int32_t slot_block(int64_t slot, int32_t block_size) { return static_cast<int32_t>(slot / block_size); }
KVSCOPE_HD inline int32_t slot_offset(int64_t slot, int32_t block_size) { return static_cast<int32_t>(slot % block_size); }
// Index of the (block, head, slot) vector in one layer's [block][kv_head][slot][head_dim] array;
// times head_dim it is KvLayout::tile_offset. Scales of quantized KV use this index directly.
KVSCOPE_HD inline int64_t vector_index(int32_t block, int32_t head, int32_t slot_in_block, int32_t n_head_kv,
                                       int32_t block_size) {
  return (static_cast<int64_t>(block) * n_head_kv + head) * block_size + slot_in_block;
}
KVSCOPE_HD inline int64_t tile_offset(int32_t block, int32_t head, int32_t slot_in_block, int32_t n_head_kv,
                                      int32_t block_size, int32_t head_dim) {
  return vector_index(block, head, slot_in_block, n_head_kv, block_size) * head_dim;
}

// ---- RoPE --------------------------------------------------------------------------------

// Angle of rotation pair i (0 <= i < n_rot/2) at position pos. Same recurrence as ggml's rope
// cache and core/cpu/ops.cpp: theta starts at pos and is multiplied by base^(-2/n_rot) i times,
// in f32, so the angles round identically.
KVSCOPE_HD inline float rope_angle(int32_t pos, int32_t i, int32_t n_rot, float base, float freq_scale) {
#if defined(__CUDA_ARCH__)
  const float theta_scale = powf(base, -2.0f / static_cast<float>(n_rot));
#else
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
#endif
  float theta = static_cast<float>(pos);
  for (int32_t j = 0; j < i; ++j) theta *= theta_scale;
  return freq_scale * theta;
}

// cos/sin of every pair's angle at pos: cs[2i] = cos, cs[2i+1] = sin (n_rot floats), the same
// recurrence as rope_angle and as core's rope_cos_sin (the attention-sink cache-position table).
KVSCOPE_HD inline void rope_cos_sin(int32_t n_rot, int32_t pos, float base, float freq_scale, float* cs) {
#if defined(__CUDA_ARCH__)
  const float theta_scale = powf(base, -2.0f / static_cast<float>(n_rot));
#else
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
#endif
  float theta = static_cast<float>(pos);
  for (int32_t i = 0; i < n_rot / 2; ++i) {
    const float angle = freq_scale * theta;
#if defined(__CUDA_ARCH__)
    cs[2 * i] = cosf(angle);
    cs[2 * i + 1] = sinf(angle);
#else
    cs[2 * i] = std::cos(angle);
    cs[2 * i + 1] = std::sin(angle);
#endif
    theta *= theta_scale;
  }
}

// Element indices (a, b) rotated together by pair i: adjacent (2i, 2i+1) for normal RoPE,
// halves (i, i + n_rot/2) for NEOX.
KVSCOPE_HD inline void rope_pair(int32_t i, int32_t n_rot, bool neox, int32_t* a, int32_t* b) {
  *a = neox ? i : 2 * i;
  *b = neox ? i + n_rot / 2 : 2 * i + 1;
}

// ---- which positions a query sees --------------------------------------------------------

// The window a layer attends with: the policy's window, narrowed to the model's own window on
// its sliding-window layers (CpuBackend::layer_window).
KVSCOPE_HD inline int32_t layer_window(int32_t policy_window, bool layer_is_swa, int32_t model_window) {
  if (layer_is_swa && model_window > 0) return policy_window == 0 ? model_window : (policy_window < model_window ? policy_window : model_window);
  return policy_window;
}

// Visible key positions of a query, in attention order: [0, n_sink) then [lo, end).
// Index i in [0, count()) maps to a position with position(i).
struct VisibleRange {
  int32_t n_sink;  // sink positions [0, n_sink)
  int32_t lo;      // first position of the window part (>= n_sink)
  int32_t end;     // one past the last visible position
  KVSCOPE_HD int32_t count() const { return n_sink + (end - lo); }
  KVSCOPE_HD int32_t position(int32_t i) const { return i < n_sink ? i : lo + (i - n_sink); }
};

// Position of key k_pos (visible) in the query's cache, i.e. its index in the visible order:
// sinks keep 0..n_sink-1, the window follows consecutively. With attention sinks the CPU backend
// (StreamingLLM) rotates keys by this position and the query by count() - 1.
KVSCOPE_HD inline int32_t cache_position(const VisibleRange& r, int32_t k_pos) {
  return k_pos < r.n_sink ? k_pos : r.n_sink + (k_pos - r.lo);
}

// Query at pos: [0, min(sinks, lo)) U [lo, pos], lo = window > 0 ? max(0, pos - window + 1) : 0.
KVSCOPE_HD inline VisibleRange visible_range(int32_t pos, int32_t window, int32_t sinks) {
  VisibleRange r;
  r.lo = window > 0 ? (pos - window + 1 > 0 ? pos - window + 1 : 0) : 0;
  r.n_sink = window > 0 ? (sinks < r.lo ? sinks : r.lo) : 0;
  r.end = pos + 1;
  return r;
}

KVSCOPE_HD inline bool is_visible(int32_t q_pos, int32_t k_pos, int32_t window, int32_t sinks) {
  if (k_pos > q_pos || k_pos < 0) return false;
  const VisibleRange r = visible_range(q_pos, window, sinks);
  return k_pos < r.n_sink || k_pos >= r.lo;
}

// Union of the visible sets of queries at positions [pos_first, pos_last] (one prompt chunk):
// the keys a prefill tile has to load. Sinks grow with pos (lo does), the window part starts at
// the first query's lo.
KVSCOPE_HD inline VisibleRange visible_union(int32_t pos_first, int32_t pos_last, int32_t window, int32_t sinks) {
  const VisibleRange f = visible_range(pos_first, window, sinks), l = visible_range(pos_last, window, sinks);
  VisibleRange r;
  r.n_sink = l.n_sink;
  r.lo = f.lo > l.n_sink ? f.lo : l.n_sink;
  r.end = pos_last + 1;
  return r;
}

// Split-K over the visible set: partitions of part_size visible positions each.
KVSCOPE_HD inline int32_t num_partitions(int32_t n_visible, int32_t part_size) { return ceil_div(n_visible, part_size); }

// ---- block-table walking ------------------------------------------------------------------

// Slot of a logical position through a block table; -1 when the position is past the table or
// its block was dropped (kNoBlock) -- attention reaching either is a bookkeeping bug.
KVSCOPE_HD inline int64_t position_slot(const int32_t* table, int32_t table_len, int32_t block_size, int32_t pos) {
  const int32_t lb = pos / block_size;
  if (pos < 0 || lb >= table_len) return -1;
  const int32_t b = table[lb];
  if (b < 0) return -1;
  return static_cast<int64_t>(b) * block_size + pos % block_size;
}

// From visible index i, the number of following visible positions (i included) that sit
// contiguously in the same physical block: the run a kernel can read as one tile segment.
KVSCOPE_HD inline int32_t visible_run_length(const VisibleRange& r, int32_t i, int32_t block_size) {
  const int32_t pos = r.position(i);
  const int32_t seg_end = i < r.n_sink ? r.n_sink : r.end;  // end position of the current segment
  const int32_t to_block_end = block_size - pos % block_size;
  const int32_t to_seg_end = seg_end - pos;
  return to_block_end < to_seg_end ? to_block_end : to_seg_end;
}

}  // namespace kvscope::kvmath
