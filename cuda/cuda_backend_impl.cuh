#pragma once
// CudaBackend's private state (cuda_backend.h keeps it behind a pointer): the device buffers,
// the uploaded weights, the KV pool and its KIVI residual slots, the per-step buffers. Host
// code only; included by the files that make up the backend: cuda_backend.cu (construction,
// KV pool, block copies), cuda_weights.cu (weight upload) and cuda_forward.cu (the step).
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_kernels.cuh"
#include "kv_math.h"

namespace kvscope {

using cuda::ActType;
using cuda::KvCodecId;
using cuda::PackedKv;

namespace cuda_host {

// Grow-only device buffer.
struct DevBuf {
  void* p = nullptr;
  size_t cap = 0;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), cap(o.cap) { o.p = nullptr, o.cap = 0; }
  DevBuf& operator=(DevBuf&& o) noexcept {
    if (this != &o) {
      release();
      p = o.p, cap = o.cap;
      o.p = nullptr, o.cap = 0;
    }
    return *this;
  }
  ~DevBuf() { release(); }
  void release() {
    if (p) cudaFree(p);
    p = nullptr;
    cap = 0;
  }
  void ensure(size_t bytes, const char* what) {
    if (bytes <= cap) return;
    release();
    const size_t want = std::max(bytes, cap + cap / 2);
    const cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
      cudaGetLastError();
      p = nullptr;
      throw std::runtime_error(std::string("CUDA: cannot allocate ") + std::to_string(want >> 20) + " MiB for " + what +
                               ": " + cudaGetErrorString(e));
    }
    cap = want;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Grow-only pinned host buffer (the step's single upload goes from here).
struct HostBuf {
  void* p = nullptr;
  size_t cap = 0;
  HostBuf() = default;
  HostBuf(const HostBuf&) = delete;
  HostBuf& operator=(const HostBuf&) = delete;
  ~HostBuf() {
    if (p) cudaFreeHost(p);
  }
  void ensure(size_t bytes) {
    if (bytes <= cap) return;
    if (p) cudaFreeHost(p);
    p = nullptr;
    const size_t want = std::max(bytes, cap * 2);
    KVSCOPE_CUDA_CHECK(cudaHostAlloc(&p, want, cudaHostAllocDefault));
    cap = want;
  }
};

}  // namespace cuda_host

struct CudaBackend::Impl {
  using DevBuf = cuda_host::DevBuf;
  using HostBuf = cuda_host::HostBuf;
  std::shared_ptr<const Model> model;
  int device = 0;
  double fraction = 0.9;
  std::string device_name;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  ActType act = ActType::F16;
  size_t act_bytes = 2;

  // Weights on the device.
  struct Layer {
    DevBuf wqkv, wo, wgu, wdown;                                // ActType matrices
    DevBuf attn_norm, ffn_norm, post_attn_norm, post_ffw_norm;  // f32 [n_embd]
    DevBuf q_norm, k_norm, bqkv;                                // f32, may be empty
  };
  std::vector<Layer> layers;
  DevBuf tok_embd, output, output_norm;
  const void* output_ptr = nullptr;  // output or tok_embd when tied
  int64_t weight_bytes = 0;

  // KV pool.
  KvLayout layout;
  AttentionPolicy policy;
  KvCodecId codec = KvCodecId::F32;
  PackedKv packed = PackedKv::None;
  DevBuf kv_pool, kv_scales;
  cuda::KvPoolView pool_view;
  // KIVI's f16 residual, as CpuKvStorage's: the rows of blocks not yet full. Residual slots are
  // handed out on the host (a block's first write takes one, its last slot's write frees it after
  // the block is quantized) and grow on demand, so memory follows the blocks being filled, not the
  // pool. Slot layout [layer][K, V][kv_head][block_size][head_dim] f16.
  DevBuf residual;
  int32_t res_capacity = 0, res_used = 0, res_in_use = 0, res_peak = 0;
  std::vector<int32_t> res_of_block;  // block -> residual slot, -1 = quantized (or never written)
  std::vector<int32_t> res_free;
  int64_t res_slot_elems = 0;  // f16 elements of one residual slot
  bool kivi() const { return cuda::packed_kv_kivi(packed); }
  // Attention sinks: cos/sin of cache positions [2 (rope_base, rope_base_swa)][sinks + window][rope_dim].
  DevBuf sink_rope;
  int64_t sink_rope_rows = 0;
  bool sink_mode() const { return policy.sinks > 0; }

  // Per-step buffers.
  HostBuf step_host;
  DevBuf step_dev;
  DevBuf x, xn, qkv, att, o, gu, h, logits, attn_ws, copies_dev;
  HostBuf copies_host;
  DevBuf error_dev;
  HostBuf error_host;

  // ---- KIVI residual slots ---------------------------------------------------------------------

  void point_residual() {
    pool_view.k_res_base = residual.as<uint16_t>();
    pool_view.v_res_base =
        residual.p ? pool_view.k_res_base + static_cast<int64_t>(layout.n_head_kv) * layout.block_size * layout.head_dim
                   : nullptr;
    pool_view.res_layer_stride = 2LL * layout.n_head_kv * layout.block_size * layout.head_dim;
    pool_view.kv.res_stride = res_slot_elems;
  }
  // Capacity for n slots, keeping the rows already there (stream order: after earlier work).
  void reserve_residual(int32_t n) {
    if (n <= res_capacity) return;
    const int32_t want = std::max(n, std::max(16, res_capacity * 2));
    DevBuf grown;
    grown.ensure(static_cast<size_t>(want) * res_slot_elems * 2, "the KIVI residual");
    if (res_capacity > 0)
      KVSCOPE_CUDA_CHECK(cudaMemcpyAsync(grown.p, residual.p, static_cast<size_t>(res_capacity) * res_slot_elems * 2,
                                         cudaMemcpyDeviceToDevice, stream));
    KVSCOPE_CUDA_CHECK(cudaStreamSynchronize(stream));
    residual = std::move(grown);
    res_capacity = want;
    point_residual();
  }
  // A zeroed slot for block b (a fresh block reads zeros where nothing was written, as the CPU's).
  int32_t take_residual(int32_t b) {
    int32_t r;
    if (!res_free.empty()) {
      r = res_free.back();
      res_free.pop_back();
    } else {
      r = res_used++;
      reserve_residual(res_used);
    }
    KVSCOPE_CUDA_CHECK(cudaMemsetAsync(residual.as<uint16_t>() + static_cast<int64_t>(r) * res_slot_elems, 0,
                                       static_cast<size_t>(res_slot_elems) * 2, stream));
    res_of_block[static_cast<size_t>(b)] = r;
    res_peak = std::max(res_peak, ++res_in_use);
    return r;
  }
  // A step's residual work: the slot every token's row goes to (res_slot[t]) and the blocks
  // whose last slot the step writes (complete: block, slot pairs). The step's attention reads
  // those blocks from the residual in f16 (as KIVI's prefill attends in full precision, and as
  // CpuKvStorage defers), each layer quantizes them after its attention, and release_completed()
  // frees their slots once the step's block -> slot map is uploaded.
  void plan_residual(const BatchView& batch, std::vector<int32_t>* res_slot, std::vector<int32_t>* complete) {
    const int32_t bs = layout.block_size;
    res_slot->resize(batch.slot_mapping.size());
    for (size_t t = 0; t < batch.slot_mapping.size(); ++t) {
      const int64_t slot = batch.slot_mapping[t];
      const int32_t b = static_cast<int32_t>(slot / bs);
      int32_t r = res_of_block[static_cast<size_t>(b)];
      if (r < 0) r = take_residual(b);
      (*res_slot)[t] = r;
      bool seen = false;
      for (size_t i = 0; i < complete->size(); i += 2) seen = seen || (*complete)[i] == b;
      if (slot % bs == bs - 1 && !seen) complete->insert(complete->end(), {b, r});
    }
  }
  void release_completed(const std::vector<int32_t>& complete) {
    for (size_t i = 0; i < complete.size(); i += 2) release_residual(complete[i]);
  }
  void release_residual(int32_t b) {
    int32_t& r = res_of_block[static_cast<size_t>(b)];
    if (r < 0) return;
    res_free.push_back(r);
    r = -1;
    --res_in_use;
  }

  // ---- weights (cuda_weights.cu) ----------------------------------------------------------------

  void upload_f32(DevBuf& dst, const std::vector<float>& v, const char* what);
  // Rows of the given matrices stacked into one [sum rows][cols] device matrix of ActType.
  void upload_matrix(DevBuf& dst, std::initializer_list<const TensorView*> parts, const char* what);
  void upload_weights();

  // ---- the KV pool (cuda_backend.cu) -----------------------------------------------------------

  void allocate_kv_pool(const KvLayout& L);
  void build_sink_rope();

  // ---- the step (cuda_forward.cu) ---------------------------------------------------------------

  struct Step;  // one forward: its checks, upload, layers and logits

  // ---- helpers -------------------------------------------------------------------------------

  cudaDataType_t gemm_type() const { return act == ActType::BF16 ? CUDA_R_16BF : CUDA_R_16F; }

  // y[t][r] = W[r] . x[t]: W [rows][cols] row-major (= column-major cols x rows, transposed),
  // x [n][cols], y [n][rows] f32.
  void gemm(const void* w, int64_t rows, int64_t cols, const void* xin, int32_t n, float* y) {
    const float alpha = 1.0f, beta = 0.0f;
    KVSCOPE_CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), n,
                                      static_cast<int>(cols), &alpha, w, gemm_type(), static_cast<int>(cols), xin,
                                      gemm_type(), static_cast<int>(cols), &beta, y, CUDA_R_32F, static_cast<int>(rows),
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  int32_t layer_window(int32_t il) const {
    const ModelConfig& c = model->config;
    return kvmath::layer_window(policy.window, c.layer_is_swa(il), c.sliding_window);
  }
  // As CpuBackend::layer_sinks: a model's own sliding layer (Gemma 3) keeps its trained,
  // sink-free window when the sinks are for the global layers only (--sinks-layers global).
  int32_t layer_sinks(int32_t il) const {
    const ModelConfig& c = model->config;
    const bool own_window = c.layer_is_swa(il) && c.sliding_window > 0;
    return own_window && !policy.sinks_in_sliding_layers ? 0 : policy.sinks;
  }

  int64_t act_row_bytes_per_token() const {
    const ModelConfig& c = model->config;
    const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff;
    return 4 * E /*x*/ + static_cast<int64_t>(act_bytes) * std::max({E, Q, F}) /*xn*/ + 4 * (Q + 2 * KV) /*qkv*/ +
           static_cast<int64_t>(act_bytes) * Q /*att*/ + 4 * E /*o*/ + 8 * F /*gu*/ +
           static_cast<int64_t>(act_bytes) * F /*h*/;
  }
};

}  // namespace kvscope
