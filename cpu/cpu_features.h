#pragma once
// CPU features that __builtin_cpu_supports cannot name on every compiler the project builds
// with: clang 14 (the fuzz build) has no "f16c" there, so it is read from CPUID directly.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kvscope {

// F16C (vcvtph2ps / vcvtps2ph): CPUID leaf 1, ECX bit 29.
inline bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
#else
  return false;
#endif
}

}  // namespace kvscope
