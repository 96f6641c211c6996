#pragma once
// <immintrin.h> for the x86 kernels, included once here: GCC 12 reports its own
// _mm512_undefined_* placeholders inside the AVX-512 headers as "used uninitialized" once they
// are inlined, and the diagnostic state at the header's lines is what counts.
#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif
