#pragma once
// Host-side error checks: every CUDA runtime / cuBLAS failure becomes a std::runtime_error that
// names the call site, so the engine (and the GUI) can report it instead of aborting.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace kvscope::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error at ") + file + ":" + std::to_string(line) + ": " + what + ": " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_?";
  }
}

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("cuBLAS error at ") + file + ":" + std::to_string(line) + ": " + what + ": " +
                           cublas_status_name(s));
}

}  // namespace kvscope::cuda

#define KVSCOPE_CUDA_CHECK(call)                                                                       \
  do {                                                                                                 \
    const cudaError_t kvscope_e_ = (call);                                                             \
    if (kvscope_e_ != cudaSuccess) ::kvscope::cuda::throw_cuda(kvscope_e_, #call, __FILE__, __LINE__); \
  } while (0)

#define KVSCOPE_CUBLAS_CHECK(call)                                                                                 \
  do {                                                                                                             \
    const cublasStatus_t kvscope_s_ = (call);                                                                      \
    if (kvscope_s_ != CUBLAS_STATUS_SUCCESS) ::kvscope::cuda::throw_cublas(kvscope_s_, #call, __FILE__, __LINE__); \
  } while (0)
