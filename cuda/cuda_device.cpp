// Device discovery, host-compiled: is there a GPU this build can run on, and why not.
#include <cuda_runtime.h>

#include <string>

#include "cuda_backend.h"

namespace kvscope {

bool cuda_device_available(std::string* why, int device) {
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return fail(std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
  if (count == 0) return fail("no CUDA device present");
  if (device < 0 || device >= count)
    return fail("CUDA device " + std::to_string(device) + " requested, " + std::to_string(count) + " present");
  cudaDeviceProp prop{};
  const cudaError_t pe = cudaGetDeviceProperties(&prop, device);
  if (pe != cudaSuccess) return fail(std::string("cannot query CUDA device: ") + cudaGetErrorString(pe));
  if (prop.major < 8)
    return fail(std::string(prop.name) + " has compute capability " + std::to_string(prop.major) + "." +
                std::to_string(prop.minor) + "; kvscope's CUDA kernels need 8.0 or newer");
  if (why) *why = std::string(prop.name);
  return true;
}

}  // namespace kvscope
