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
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
  return false;
#endif
}

bool available() {
  static const bool ok = detect();
  return ok;
}

// Offset that makes the weight's levels unsigned bytes (see gemv_kernels.h).
int32_t level_offset(GgmlType t) { return t == GgmlType::Q8_0 ? 128 : t == GgmlType::Q4_0 ? 8 : 16; }

// Rows per pool chunk: enough that the claim and the row-group prefetch warm-up are noise.
constexpr int64_t kRowsPerChunk = 64;

}  // namespace

bool gemv_handles(GgmlType type) {
  return (type == GgmlType::Q8_0 || type == GgmlType::Q4_0 || type == GgmlType::Q5_0) && available();
}

void gemv(const TensorView& w, const uint8_t* xc, float* y, ThreadPool& pool) {
  const GgmlType type = w.type();
  const int64_t nb = w.ne(0) / QK8_0, n_out = w.rows(), np = (nb + 1) / 2;
  const int32_t off = level_offset(type);
  // The caller's scratch, reused across calls: decode steps do not allocate.
  thread_local std::vector<uint8_t> buf;
  const size_t qs_bytes = static_cast<size_t>(np) * 64, bias_bytes = static_cast<size_t>(np) * 64;
  buf.resize(qs_bytes + bias_bytes + static_cast<size_t>(np) * 64 + 64);
  uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  auto* qs = base;
  auto* bias = reinterpret_cast<int32_t*>(base + qs_bytes);
  auto* dx = reinterpret_cast<float*>(base + qs_bytes + bias_bytes);
  std::memset(base, 0, qs_bytes + bias_bytes + static_cast<size_t>(np) * 64);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bx = xc + b * sizeof(BlockQ8_0);
    const auto* q = reinterpret_cast<const int8_t*>(bx + offsetof(BlockQ8_0, qs));
    std::memcpy(qs + 32 * b, q, 32);
    for (int i = 0; i < 8; ++i) bias[8 * b + i] = -off * (q[4 * i] + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
    uint16_t h;
    std::memcpy(&h, bx, 2);
    const float d = fp16_to_fp32(h);
    for (int i = 0; i < 8; ++i) dx[16 * (b / 2) + 8 * (b % 2) + i] = d;
  }
  const PackedQ8Row x{qs, bias, dx, nb};
  const size_t row_bytes = w.row_bytes();
  const int64_t n_chunks = (n_out + kRowsPerChunk - 1) / kRowsPerChunk;
  pool.parallel_for(n_chunks, [&](int64_t c0, int64_t c1, int) {
    const int64_t r0 = c0 * kRowsPerChunk, r1 = c1 * kRowsPerChunk < n_out ? c1 * kRowsPerChunk : n_out;
    gemv_q8_family_avx512(type, w.data, row_bytes, r0, r1, x, y + r0);
  });
}

}  // namespace kvscope
