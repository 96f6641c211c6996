// GEMV driver: CPU check, the per-call activation unpacking, and the split over the pool.
#include "cpu/gemv.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/gemv_kernels.h"
#include "cpu/thread_pool.h"

namespace kvscope {

using namespace gemv_detail;

namespace {

bool detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (const char* env = std::getenv("KVSCOPE_GEMV"); env && std::string(env) == "off") return false;
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
         cpu_has_f16c();
#else
  return false;
#endif
}

bool available() {
  static const bool ok = detect();
  return ok;
}

// Offset that makes the weight's levels unsigned bytes (see gemv_kernels.h).
int32_t level_offset(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::IQ4_NL || t == GgmlType::MXFP4 ? 128 : t == GgmlType::Q4_0 ? 8 : 16;
}

// Rows per unit of work: enough that the row-group prefetch warm-up is noise.
constexpr int64_t kRowsPerChunk = 64;
// Pool claims per thread. gemma's output matrix is 4096 units: 4 claims per thread (the pool's
// default) would be 22 MB each, and a thread descheduled in its last one on a shared machine
// leaves the other waiting for all of it.
constexpr int kClaimsPerThread = 16;

}  // namespace

bool gemv_handles(GgmlType type) {
  return (type == GgmlType::Q8_0 || type == GgmlType::Q4_0 || type == GgmlType::Q5_0 || type == GgmlType::IQ4_NL ||
          type == GgmlType::MXFP4) &&
         available();
}

void gemv_multi(std::span<const GemvTarget> targets, const uint8_t* xc, ThreadPool& pool) {
  if (targets.empty()) return;
  const int64_t n_in = targets[0].w.ne(0), nb = n_in / QK8_0, np = (nb + 1) / 2;
  // The caller's scratch, reused across calls: decode steps do not allocate. Levels and scales
  // once; one bias array per level offset the targets use (Q5_0 and Q8_0 mix in one layer).
  constexpr int32_t kOffsets[3] = {128, 8, 16};
  thread_local std::vector<uint8_t> buf;
  const size_t part = static_cast<size_t>(np) * 64;
  buf.resize(5 * part + 64);
  uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  std::memset(base, 0, 5 * part);
  uint8_t* qs = base;
  auto* dx = reinterpret_cast<float*>(base + part);
  auto bias_of = [&](int32_t off) {
    const int slot = off == kOffsets[0] ? 0 : off == kOffsets[1] ? 1 : 2;
    return reinterpret_cast<int32_t*>(base + (2 + slot) * part);
  };
  bool used[3] = {false, false, false};
  for (const GemvTarget& t : targets) {
    const int32_t off = level_offset(t.w.type());
    used[off == kOffsets[0] ? 0 : off == kOffsets[1] ? 1 : 2] = true;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bx = xc + b * sizeof(BlockQ8_0);
    const auto* q = reinterpret_cast<const int8_t*>(bx + offsetof(BlockQ8_0, qs));
    std::memcpy(qs + 32 * b, q, 32);
    for (int o = 0; o < 3; ++o) {
      if (!used[o]) continue;
      int32_t* bias = bias_of(kOffsets[o]);
      for (int i = 0; i < 8; ++i)
        bias[8 * b + i] = -kOffsets[o] * (q[4 * i] + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
    }
    uint16_t h;
    std::memcpy(&h, bx, 2);
    const float d = fp16_to_fp32(h);
    for (int i = 0; i < 8; ++i) dx[16 * (b / 2) + 8 * (b % 2) + i] = d;
  }
  // All targets' rows in one pool call (one hand-off for Q, K and V, or gate and up):
  // chunk c belongs to the target whose [first_chunk, next first_chunk) holds it.
  int64_t first_chunk[8];
  const size_t n_t = targets.size() < 8 ? targets.size() : 8;
  int64_t n_chunks = 0;
  for (size_t i = 0; i < n_t; ++i) {
    first_chunk[i] = n_chunks;
    n_chunks += (targets[i].w.rows() + kRowsPerChunk - 1) / kRowsPerChunk;
  }
  pool.parallel_for(
      n_chunks,
      [&](int64_t c0, int64_t c1, int) {
        for (size_t i = 0; i < n_t && c0 < c1; ++i) {
          const int64_t end_i = i + 1 < n_t ? first_chunk[i + 1] : n_chunks;
          if (c0 >= end_i) continue;
          const int64_t e = c1 < end_i ? c1 : end_i, n_out = targets[i].w.rows();
          const int64_t r0 = (c0 - first_chunk[i]) * kRowsPerChunk;
          const int64_t r1 =
              (e - first_chunk[i]) * kRowsPerChunk < n_out ? (e - first_chunk[i]) * kRowsPerChunk : n_out;
          const GgmlType type = targets[i].w.type();
          const PackedQ8Row x{qs, bias_of(level_offset(type)), dx, nb};
          gemv_q8_family_avx512(type, targets[i].w.data, targets[i].w.row_bytes(), r0, r1, x, targets[i].y + r0);
          c0 = e;
        }
      },
      kClaimsPerThread);
  for (size_t i = n_t; i < targets.size(); ++i) gemv_multi(targets.subspan(i, 1), xc, pool);  // > 8: rare, correct
}

void gemv(const TensorView& w, const uint8_t* xc, float* y, ThreadPool& pool) {
  const GemvTarget t{w, y};
  gemv_multi(std::span<const GemvTarget>(&t, 1), xc, pool);
}

}  // namespace kvscope
