#pragma once
// The CUDA backend: the model's matrices in device memory as f16 (bf16 for bf16 models), GEMMs
// through cuBLAS (tensor cores, f32 accumulation and output), the KV block pool in device memory
// with KvLayout's block layout, and paged-attention kernels that walk the block tables.
// Plain C++ header (no CUDA include): host code and tests compile it with the host compiler.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/backend.h"
#include "model/model.h"

namespace kvscope {

// True when a CUDA device this build can run on (compute capability >= 8.0) is present;
// otherwise false, with the reason in *why (no driver, no device, too old...).
bool cuda_device_available(std::string* why = nullptr, int device = 0);

struct CudaMemoryInfo {
  int64_t total = 0;      // device memory
  int64_t free = 0;       // free now (cudaMemGetInfo)
  int64_t weights = 0;    // bytes of uploaded weights
  int64_t kv_pool = 0;    // bytes of the KV block pool (0 before init_kv)
  int64_t workspace = 0;  // activations, split-K and step buffers allocated so far
};

class CudaBackend : public Backend {
 public:
  // Uploads the weights (dequantized on the host). Throws std::runtime_error when the device is
  // missing or memory runs out. gpu_memory_fraction: share of the device's total memory this
  // process may use in all (weights + KV pool + workspace), as vLLM's gpu_memory_utilization.
  CudaBackend(std::shared_ptr<const Model> model, int device = 0, double gpu_memory_fraction = 0.9);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override;  // "cuda:0 (NVIDIA H200, f16 weights)"
  // layout.num_blocks <= 0 asks for recommended_num_blocks(layout); kv_layout() returns the
  // resolved layout. Throws std::invalid_argument (layout vs model, head_dim not a multiple of 8
  // or above 256) or std::runtime_error (allocation).
  // One KV group only: supports_kv_groups() stays false, so the engine keeps Gemma 3 on one
  // block table (its sliding layers mask instead of freeing blocks) and --hybrid-kv on is
  // refused with a message; init_kv_groups (Backend's default) takes a single all-layer group.
  void init_kv(const KvLayout& layout, const AttentionPolicy& policy) override;
  const KvLayout& kv_layout() const override;
  int64_t kv_residual_peak_bytes() const override;  // KIVI: f16 rows of the blocks being filled, at most
  void forward(const BatchView& batch, float* logits) override;
  void copy_blocks(std::span<const BlockCopy> copies) override;

  // Blocks of `layout` (num_blocks ignored) that fit in fraction * total device memory after
  // what is already in use (weights, other processes; a current KV pool counts as free, since
  // init_kv replaces it) and a reserve for activations (see activation_reserve_bytes).
  int32_t recommended_num_blocks(const KvLayout& layout_without_blocks, double fraction) const;
  int32_t recommended_num_blocks(const KvLayout& layout_without_blocks) const;
  // Activations for a 2048-token step, logits of 256 rows, and 256 MiB for cuBLAS / split-K.
  int64_t activation_reserve_bytes() const;
  double gpu_memory_fraction() const;
  CudaMemoryInfo memory() const;
  int device() const;
  void synchronize();  // waits for the backend's stream (benchmarks)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Model> model, int device = 0,
                                           double gpu_memory_fraction = 0.9);

}  // namespace kvscope
