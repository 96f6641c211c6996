// Host-only check, not built by CMake: cuda/kv_math.h's fp8 encoders against CUDA's own
// __nv_cvt_float_to_fp8 (cuda_fp8.h host implementation), both saturation modes, over every f32
// bit pattern but NaNs, and the 256 decodes against __nv_cvt_fp8_to_halfraw. ~4 minutes.
//   g++ -O2 -std=c++20 -I/usr/local/cuda/include cuda/tools/fp8_exhaustive_check.cpp -o /tmp/fp8-exhaustive && /tmp/fp8-exhaustive
#include <cuda_fp8.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include "../kv_math.h"
using namespace kvscope::kvmath;
int main() {
  uint64_t bad[4] = {0, 0, 0, 0};
  for (uint64_t i = 0; i <= 0xFFFFFFFFull; ++i) {
    uint32_t u = (uint32_t)i;
    float x;
    memcpy(&x, &u, 4);
    if (is_nan_bits(u)) continue;
    uint8_t a = f32_to_fp8_e4m3(x, Fp8Overflow::Saturate), b = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    if (a != b && bad[0]++ < 5) printf("e4m3 sat %08x %g: %02x vs %02x\n", u, x, a, b);
    a = f32_to_fp8_e4m3(x, Fp8Overflow::Ieee);
    b = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3);
    if (a != b && bad[1]++ < 5) printf("e4m3 nosat %08x %g: %02x vs %02x\n", u, x, a, b);
    a = f32_to_fp8_e5m2(x, Fp8Overflow::Saturate);
    b = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    if (a != b && bad[2]++ < 5) printf("e5m2 sat %08x %g: %02x vs %02x\n", u, x, a, b);
    a = f32_to_fp8_e5m2(x, Fp8Overflow::Ieee);
    b = __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2);
    if (a != b && bad[3]++ < 5) printf("e5m2 nosat %08x %g: %02x vs %02x\n", u, x, a, b);
  }
  for (int c = 0; c < 256; ++c) {
    __half_raw h4 = __nv_cvt_fp8_to_halfraw(c, __NV_E4M3), h5 = __nv_cvt_fp8_to_halfraw(c, __NV_E5M2);
    float f4 = __half2float(__half(h4)), f5 = __half2float(__half(h5));
    float m4 = fp8_e4m3_to_f32(c), m5 = fp8_e5m2_to_f32(c);
    if (!(f4 == m4 || (f4 != f4 && m4 != m4))) printf("dec e4m3 %02x %g %g\n", c, f4, m4);
    if (!(f5 == m5 || (f5 != f5 && m5 != m5))) printf("dec e5m2 %02x %g %g\n", c, f5, m5);
  }
  printf("mismatches: %lu %lu %lu %lu (all non-NaN f32 bit patterns)\n", bad[0], bad[1], bad[2], bad[3]);
  return (bad[0] | bad[1] | bad[2] | bad[3]) ? 1 : 0;
}
