#pragma once
// Arithmetic shared by the CUDA kernels and the host: KV element codecs (fp8 e4m3 / e5m2, int8
// with a scale), slot addressing in the paged KV pool, RoPE angles, the visible-position set of
// a query under a sliding window with sinks, and block-table walking.
//
// Every function is `KVSCOPE_HD inline`: __host__ __device__ under nvcc, plain inline under a
// host compiler, so tests/cuda/test_cuda_host_math.cpp checks the very code the kernels run. No CUDA
// header is needed; the host side uses <cmath> (pow, cos, sin).
//
// The fp8 / int8 KV codecs are not defined here: they are core/kv/kv_quant.h's (the CPU
// backend's own, also `KVSCOPE_HD inline`), re-exported below, so both backends run one
// implementation. Its conventions (OCP 8-bit floating point v1.0): E4M3 bias 7, no inf, max
// 448; E5M2 IEEE-like, bias 15, max 57344; round to nearest even; NaN stays NaN. Overflow is an
// explicit Fp8Overflow mode: Saturate (+-max finite, as PTX cvt.satfinite and vLLM do) or Ieee
// (inf for E5M2, NaN for E4M3). The KV cache uses E4M3 Saturate and E5M2 Ieee (kv_quant.h's
// one-argument overloads); the kernels name the mode at every call. Both encoders, in both
// modes, match CUDA's cuda_fp8.h (__nv_cvt_float_to_fp8) bit for bit over all 2^32 f32 bit
// patterns but NaNs (cuda/tools/fp8_exhaustive_check.cpp). Quantized KV stores one f32 scale
// per (token, kv head) vector: scale = absmax / qmax (1 for an all-zero vector), code =
// encode(x / scale), value = decode(code) * scale.
#include <cmath>
#include <cstdint>

#include "../core/kv/kv_quant.h"  // KVSCOPE_HD and the KV codecs (relative: tools build without -I)

namespace kvscope::kvmath {

// ---- bit helpers -------------------------------------------------------------------------

KVSCOPE_HD inline uint32_t f32_bits(float f) { return kvq::bits_of(f); }
KVSCOPE_HD inline float f32_from_bits(uint32_t u) { return kvq::float_of(u); }
KVSCOPE_HD inline bool is_nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }
KVSCOPE_HD inline bool is_inf_bits(uint32_t u) { return (u & 0x7FFFFFFFu) == 0x7F800000u; }

KVSCOPE_HD inline int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

// ---- FP8 and int8: core/kv/kv_quant.h's codecs -------------------------------------------------

using kvq::f32_to_fp8_e4m3;  // (x, mode), and (x) = Saturate
using kvq::f32_to_fp8_e5m2;  // (x, mode), and (x) = Ieee
using kvq::fp8_e4m3_to_f32;
using kvq::fp8_e5m2_to_f32;
using kvq::Fp8Overflow;

constexpr float kFp8E4M3Max = kvq::kE4M3Max;
constexpr float kFp8E5M2Max = kvq::kE5M2Max;
constexpr float kInt8Max = kvq::kInt8Max;

// Scale of one head vector whose largest |x| is absmax, for a code range of +-qmax (a kernel
// reduces absmax across threads first, so it takes the reduced value, not the vector).
KVSCOPE_HD inline float kv_quant_scale(float absmax, float qmax) { return kvq::kv_scale_of_absmax(absmax, qmax); }

// Symmetric int8: round(x / scale) to nearest even, clamped to [-127, 127] (-128 unused), NaN -> 0.
KVSCOPE_HD inline int8_t f32_to_int8(float x, float scale) { return kvq::f32_to_int8(x / scale); }
KVSCOPE_HD inline float int8_to_f32(int8_t q, float scale) { return static_cast<float>(q) * scale; }

// ---- slot addressing (must agree with KvLayout) ----------------------------------------------

KVSCOPE_HD inline int32_t slot_block(int64_t slot, int32_t block_size) {
  return static_cast<int32_t>(slot / block_size);
}
KVSCOPE_HD inline int32_t slot_offset(int64_t slot, int32_t block_size) {
  return static_cast<int32_t>(slot % block_size);
}
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
// cache and cpu/ops.cpp: theta starts at pos and is multiplied by base^(-2/n_rot) i times,
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
  if (layer_is_swa && model_window > 0)
    return policy_window == 0 ? model_window : (policy_window < model_window ? policy_window : model_window);
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
KVSCOPE_HD inline int32_t num_partitions(int32_t n_visible, int32_t part_size) {
  return ceil_div(n_visible, part_size);
}

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
