// CudaBackend: host side of the CUDA forward. Reads top to bottom like CpuBackend::forward;
// the math of each step lives in cuda_kernels.cu / cuda_attention.cu and in cuBLAS.
//
// Weights: every matrix is dequantized on the host (dequantize_row, whatever its GGUF type) and
// uploaded once as f16 -- bf16 when the model's matrices are bf16 -- so one GEMM path
// (cublasGemmEx, f16/bf16 inputs, f32 accumulate and output, tensor cores) serves every file.
// q/k/v are packed into one [q_dim + 2 kv_dim][n_embd] matrix and gate/up into one [2 n_ff][n_embd]
// matrix: one GEMM each.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_kernels.cuh"
#include "gguf/ggml_types.h"
#include "kv_math.h"

namespace kvscope {

using cuda::ActType;
using cuda::KvCodecId;
using cuda::PackedKv;

namespace {

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
  template <typename T> T* as() const { return static_cast<T*>(p); }
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

// The packed 4/2-bit dtypes: tiles of codes and f16 parameters (cuda_packed.cu), not an element
// codec. None for every other dtype.
PackedKv packed_for(KvDtype t) {
  switch (t) {
    case KvDtype::INT4: return PackedKv::INT4;
    case KvDtype::ROT4: return PackedKv::ROT4;
    case KvDtype::KIVI4: return PackedKv::KIVI4;
    case KvDtype::KIVI2: return PackedKv::KIVI2;
    default: return PackedKv::None;
  }
}

// By name, so this file builds with KvDtype before and after the quantized dtypes joined it.
// Scaled dtypes keep one f32 scale per (token, kv head) vector in [block][kv_head][slot] arrays,
// scale = absmax / qmax (1 for a zero vector), as CpuKvStorage and kv/kv_quant.h do. Packed
// dtypes (packed_for) have no element codec; F32 stands in and is never used for them.
KvCodecId codec_for(KvDtype t) {
  const std::string n = kv_dtype_name(t);
  if (n == "f32") return KvCodecId::F32;
  if (n == "f16") return KvCodecId::F16;
  if (n == "bf16") return KvCodecId::BF16;
  if (n == "int8") return KvCodecId::INT8;
  if (n == "fp8_e4m3") return KvCodecId::FP8_E4M3;
  if (n == "fp8_e5m2") return KvCodecId::FP8_E5M2;
  if (packed_for(t) != PackedKv::None) return KvCodecId::F32;
  if (n == "rot4c")  // block centering needs the residual and a completion kernel the device does not have yet
    throw std::invalid_argument("CUDA backend: --kv-dtype rot4c runs on the CPU backend only (rot4 is the CUDA form)");
  throw std::invalid_argument("CUDA backend: unsupported KV dtype " + n + " (supported: " + kv_dtype_choices() + ")");
}

// Runs fn(begin, end) over [0, n) on up to `threads` host threads.
template <typename F>
void parallel_rows(int64_t n, F&& fn) {
  const int64_t hw = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const int64_t parts = std::min<int64_t>(hw, std::max<int64_t>(1, n / 64));
  if (parts <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::thread> ts;
  for (int64_t i = 0; i < parts; ++i) ts.emplace_back([&, i] { fn(n * i / parts, n * (i + 1) / parts); });
  for (auto& t : ts) t.join();
}

}  // namespace

struct CudaBackend::Impl {
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
    DevBuf wqkv, wo, wgu, wdown;                                 // ActType matrices
    DevBuf attn_norm, ffn_norm, post_attn_norm, post_ffw_norm;   // f32 [n_embd]
    DevBuf q_norm, k_norm, bqkv;                                 // f32, may be empty
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
  int64_t res_slot_elems = 0;         // f16 elements of one residual slot
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
    pool_view.v_res_base = residual.p ? pool_view.k_res_base + static_cast<int64_t>(layout.n_head_kv) * layout.block_size * layout.head_dim : nullptr;
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

  // ---- weights -------------------------------------------------------------------------------

  void upload_f32(DevBuf& dst, const std::vector<float>& v, const char* what) {
    if (v.empty()) return;
    dst.ensure(v.size() * sizeof(float), what);
    KVSCOPE_CUDA_CHECK(cudaMemcpy(dst.p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    weight_bytes += static_cast<int64_t>(v.size() * sizeof(float));
  }

  // Rows of the given matrices stacked into one [sum rows][cols] device matrix of ActType.
  void upload_matrix(DevBuf& dst, std::initializer_list<const TensorView*> parts, const char* what) {
    const int64_t cols = (*parts.begin())->ne(0);
    int64_t rows = 0;
    for (const TensorView* t : parts) {
      if (t->ne(0) != cols) throw std::invalid_argument(std::string("CUDA upload: ") + what + ": column mismatch");
      rows += t->rows();
    }
    dst.ensure(static_cast<size_t>(rows * cols) * act_bytes, what);
    constexpr int64_t kChunkElems = int64_t{8} << 20;  // 16 MiB of f16 per staging copy
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkElems / cols);
    std::vector<uint16_t> staging(static_cast<size_t>(std::min(rows, chunk_rows) * cols));
    int64_t dst_row = 0;
    for (const TensorView* t : parts) {
      for (int64_t r0 = 0; r0 < t->rows(); r0 += chunk_rows) {
        const int64_t nr = std::min(chunk_rows, t->rows() - r0);
        const bool bf16 = act == ActType::BF16;
        parallel_rows(nr, [&](int64_t b, int64_t e) {
          std::vector<float> row(static_cast<size_t>(cols));
          for (int64_t r = b; r < e; ++r) {
            dequantize_row(t->type(), t->row(r0 + r), row.data(), cols);
            uint16_t* out = staging.data() + r * cols;
            for (int64_t c = 0; c < cols; ++c) out[c] = bf16 ? fp32_to_bf16(row[c]) : fp32_to_fp16(row[c]);
          }
        });
        KVSCOPE_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(dst.p) + dst_row * cols * act_bytes, staging.data(),
                                      static_cast<size_t>(nr * cols) * act_bytes, cudaMemcpyHostToDevice));
        dst_row += nr;
      }
    }
    weight_bytes += rows * cols * static_cast<int64_t>(act_bytes);
  }

  void upload_weights() {
    const ModelConfig& c = model->config;
    const ModelWeights& W = model->weights;
    const GgmlType wt = W.layers.empty() ? W.token_embd.type() : W.layers[0].wq.type();
    act = (wt == GgmlType::BF16 || W.token_embd.type() == GgmlType::BF16) ? ActType::BF16 : ActType::F16;
    act_bytes = 2;
    upload_matrix(tok_embd, {&W.token_embd}, "token_embd");
    upload_f32(output_norm, W.output_norm, "output_norm");
    if (W.tied_output || W.output.data == W.token_embd.data) {
      output_ptr = tok_embd.p;
    } else {
      upload_matrix(output, {&W.output}, "output");
      output_ptr = output.p;
    }
    layers.resize(static_cast<size_t>(c.n_layer));
    for (int32_t il = 0; il < c.n_layer; ++il) {
      const LayerWeights& L = W.layers[static_cast<size_t>(il)];
      Layer& d = layers[static_cast<size_t>(il)];
      upload_matrix(d.wqkv, {&L.wq, &L.wk, &L.wv}, "attn_qkv");
      upload_matrix(d.wo, {&L.wo}, "attn_output");
      upload_matrix(d.wgu, {&L.w_gate, &L.w_up}, "ffn_gate_up");
      upload_matrix(d.wdown, {&L.w_down}, "ffn_down");
      upload_f32(d.attn_norm, L.attn_norm, "attn_norm");
      upload_f32(d.ffn_norm, L.ffn_norm, "ffn_norm");
      upload_f32(d.post_attn_norm, L.post_attn_norm, "post_attention_norm");
      upload_f32(d.post_ffw_norm, L.post_ffw_norm, "post_ffw_norm");
      upload_f32(d.q_norm, L.q_norm, "attn_q_norm");
      upload_f32(d.k_norm, L.k_norm, "attn_k_norm");
      if (!L.bq.empty()) {
        std::vector<float> b(L.bq);
        b.insert(b.end(), L.bk.begin(), L.bk.end());
        b.insert(b.end(), L.bv.begin(), L.bv.end());
        upload_f32(d.bqkv, b, "attn_qkv_bias");
      }
    }
  }

  // ---- helpers -------------------------------------------------------------------------------

  cudaDataType_t gemm_type() const { return act == ActType::BF16 ? CUDA_R_16BF : CUDA_R_16F; }

  // y[t][r] = W[r] . x[t]: W [rows][cols] row-major (= column-major cols x rows, transposed),
  // x [n][cols], y [n][rows] f32.
  void gemm(const void* w, int64_t rows, int64_t cols, const void* xin, int32_t n, float* y) {
    const float alpha = 1.0f, beta = 0.0f;
    KVSCOPE_CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), n, static_cast<int>(cols),
                                      &alpha, w, gemm_type(), static_cast<int>(cols), xin, gemm_type(),
                                      static_cast<int>(cols), &beta, y, CUDA_R_32F, static_cast<int>(rows),
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

// ---- construction ------------------------------------------------------------------------------

CudaBackend::CudaBackend(std::shared_ptr<const Model> model, int device, double gpu_memory_fraction)
    : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.model = std::move(model);
  I.device = device;
  I.fraction = gpu_memory_fraction;
  if (!(gpu_memory_fraction > 0.0 && gpu_memory_fraction <= 1.0))
    throw std::invalid_argument("gpu_memory_fraction must be in (0, 1]");
  std::string why;
  if (!cuda_device_available(&why, device)) throw std::runtime_error("CUDA backend: " + why);
  I.device_name = why;
  KVSCOPE_CUDA_CHECK(cudaSetDevice(device));
  const ModelConfig& c = I.model->config;
  if (c.head_dim % 8 != 0 || c.head_dim > cuda::kMaxHeadDim)
    throw std::invalid_argument("CUDA backend: head_dim " + std::to_string(c.head_dim) +
                                " unsupported (needs a multiple of 8, at most 256)");
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
    throw std::invalid_argument("CUDA backend: rope_dim must be even and <= head_dim");
  // Llama 3.1+ per-pair RoPE frequency factors are applied by the CPU backend only; running
  // without them would give plausible but wrong logits, so refuse instead.
  if (c.rope_factors() != nullptr)
    throw std::invalid_argument("CUDA backend: RoPE frequency factors (rope_freqs.weight, Llama 3.1+) are not "
                                "implemented on CUDA yet; use --backend cpu");
  KVSCOPE_CUDA_CHECK(cudaStreamCreateWithFlags(&I.stream, cudaStreamNonBlocking));
  KVSCOPE_CUBLAS_CHECK(cublasCreate(&I.cublas));
  KVSCOPE_CUBLAS_CHECK(cublasSetStream(I.cublas, I.stream));
  I.upload_weights();
  I.error_dev.ensure(sizeof(int32_t), "error flag");
  KVSCOPE_CUDA_CHECK(cudaMemset(I.error_dev.p, 0, sizeof(int32_t)));
  I.error_host.ensure(sizeof(int32_t));
  KVSCOPE_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaBackend::~CudaBackend() {
  if (!impl_) return;
  cudaSetDevice(impl_->device);
  if (impl_->stream) cudaStreamSynchronize(impl_->stream);
  if (impl_->cublas) cublasDestroy(impl_->cublas);
  Impl* raw = impl_.get();
  cudaStream_t s = raw->stream;
  impl_.reset();  // frees device buffers
  if (s) cudaStreamDestroy(s);
}

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Model> model, int device, double gpu_memory_fraction) {
  return std::make_unique<CudaBackend>(std::move(model), device, gpu_memory_fraction);
}

std::string CudaBackend::name() const {
  return "cuda:" + std::to_string(impl_->device) + " (" + impl_->device_name + ", " +
         (impl_->act == ActType::BF16 ? "bf16" : "f16") + " weights)";
}

const KvLayout& CudaBackend::kv_layout() const { return impl_->layout; }
int64_t CudaBackend::kv_residual_peak_bytes() const {
  return static_cast<int64_t>(impl_->res_peak) * impl_->res_slot_elems * 2;
}
double CudaBackend::gpu_memory_fraction() const { return impl_->fraction; }
int CudaBackend::device() const { return impl_->device; }
void CudaBackend::synchronize() { KVSCOPE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

CudaMemoryInfo CudaBackend::memory() const {
  const Impl& I = *impl_;
  CudaMemoryInfo m;
  size_t free_b = 0, total_b = 0;
  KVSCOPE_CUDA_CHECK(cudaSetDevice(I.device));
  KVSCOPE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  m.total = static_cast<int64_t>(total_b);
  m.free = static_cast<int64_t>(free_b);
  m.weights = I.weight_bytes;
  m.kv_pool = static_cast<int64_t>(I.kv_pool.cap + I.kv_scales.cap + I.residual.cap);
  for (const DevBuf* b : {&I.step_dev, &I.x, &I.xn, &I.qkv, &I.att, &I.o, &I.gu, &I.h, &I.logits, &I.attn_ws})
    m.workspace += static_cast<int64_t>(b->cap);
  return m;
}

int64_t CudaBackend::activation_reserve_bytes() const {
  const ModelConfig& c = impl_->model->config;
  return 2048 * impl_->act_row_bytes_per_token() + int64_t{256} * c.n_vocab * 4 + (int64_t{256} << 20);
}

int32_t CudaBackend::recommended_num_blocks(const KvLayout& layout_without_blocks) const {
  return recommended_num_blocks(layout_without_blocks, impl_->fraction);
}

int32_t CudaBackend::recommended_num_blocks(const KvLayout& layout, double fraction) const {
  const Impl& I = *impl_;
  size_t free_b = 0, total_b = 0;
  KVSCOPE_CUDA_CHECK(cudaSetDevice(I.device));
  KVSCOPE_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const double in_use = static_cast<double>(total_b - free_b) - static_cast<double>(I.kv_pool.cap + I.kv_scales.cap);
  const double budget = fraction * static_cast<double>(total_b) - in_use - static_cast<double>(activation_reserve_bytes());
  KvLayout L = layout;
  L.num_blocks = 1;
  const double per_block = static_cast<double>(L.bytes_per_block());
  if (budget <= 0 || per_block <= 0) return 0;
  return static_cast<int32_t>(std::min(budget / per_block, 2147483647.0));
}

void CudaBackend::init_kv(const KvLayout& layout_in, const AttentionPolicy& policy) {
  Impl& I = *impl_;
  const ModelConfig& c = I.model->config;
  if (layout_in.n_layer != c.n_layer || layout_in.n_head_kv != c.n_head_kv || layout_in.head_dim != c.head_dim)
    throw std::invalid_argument("KV layout does not match the model");
  if (layout_in.block_size <= 0) throw std::invalid_argument("KV layout: block_size must be positive");
  // supports_kivi_residual() is false (the engine refuses it first); this guards direct callers.
  if (layout_in.kivi_residual > 0)
    throw std::invalid_argument("the CUDA backend keeps only the block being filled in f16 (no --kivi-residual): use --kivi-residual 0 or --backend cpu");
  // As CpuBackend: sinks need a window, and switch RoPE to cache positions (StreamingLLM).
  if (policy.window < 0 || policy.sinks < 0) throw std::invalid_argument("window and sinks must not be negative");
  if (policy.sinks > 0 && policy.window == 0) throw std::invalid_argument("attention sinks need a sliding window");
  if (policy.sinks > 0 && c.traits.rope == RopeStyle::Neox && c.rope_dim % 16 != 0)
    throw std::invalid_argument("CUDA backend: attention sinks with NEOX RoPE need rope_dim a multiple of 16");
  KvLayout L = layout_in;
  KVSCOPE_CUDA_CHECK(cudaSetDevice(I.device));
  KVSCOPE_CUDA_CHECK(cudaStreamSynchronize(I.stream));
  if (L.num_blocks <= 0) {
    L.num_blocks = recommended_num_blocks(L);
    if (L.num_blocks <= 0)
      throw std::runtime_error("CUDA backend: no device memory left for the KV cache at gpu_memory_fraction " +
                               std::to_string(I.fraction));
  }
  I.codec = codec_for(L.dtype);
  I.packed = packed_for(L.dtype);
  if (I.packed != PackedKv::None)
    if (const std::string why = kv_format_problem(L.dtype, L.head_dim, L.block_size, L.quant_group); !why.empty())
      throw std::invalid_argument("CUDA backend: " + why);
  I.kv_pool.release();
  I.kv_scales.release();
  I.residual.release();
  I.res_capacity = I.res_used = I.res_in_use = I.res_peak = 0;
  I.res_free.clear();
  I.res_of_block.assign(I.kivi() ? static_cast<size_t>(L.num_blocks) : 0, -1);
  I.res_slot_elems = 2LL * L.n_layer * L.n_head_kv * L.block_size * L.head_dim;
  const int64_t elem = cuda::kv_codec_elem_bytes(I.codec);
  const int64_t vectors_per_layer = static_cast<int64_t>(L.num_blocks) * L.n_head_kv * L.block_size;
  // Packed: per layer num_blocks * n_kv tiles of tile_bytes (K and V differ for KIVI).
  int64_t tile_bytes[2] = {0, 0}, row_bytes[2] = {0, 0};
  for (int v = 0; v < 2; ++v) {
    row_bytes[v] = kv_row_bytes(L.dtype, v, L.head_dim, L.quant_group);
    tile_bytes[v] = row_bytes[v] * L.block_size + kv_tile_extra_bytes(L.dtype, v, L.head_dim, L.block_size);
  }
  const int64_t tiles_per_layer = static_cast<int64_t>(L.num_blocks) * L.n_head_kv;
  const int64_t layer_bytes = I.packed != PackedKv::None ? tiles_per_layer * tile_bytes[0] : vectors_per_layer * L.head_dim * elem;
  const int64_t v_layer_bytes = I.packed != PackedKv::None ? tiles_per_layer * tile_bytes[1] : layer_bytes;
  try {
    I.kv_pool.ensure(static_cast<size_t>(L.n_layer * (layer_bytes + v_layer_bytes)), "the KV cache");
    if (cuda::kv_codec_scaled(I.codec))
      I.kv_scales.ensure(static_cast<size_t>(2 * L.n_layer * vectors_per_layer) * sizeof(float), "the KV scales");
  } catch (const std::runtime_error&) {
    I.kv_pool.release();
    throw std::runtime_error("cannot allocate the KV cache: " + std::to_string(L.total_bytes() >> 20) +
                             " MiB requested for " + std::to_string(L.num_blocks) + " blocks on " + I.device_name);
  }
  KVSCOPE_CUDA_CHECK(cudaMemset(I.kv_pool.p, 0, I.kv_pool.cap));
  if (I.kv_scales.p) KVSCOPE_CUDA_CHECK(cudaMemset(I.kv_scales.p, 0, I.kv_scales.cap));
  cuda::KvPoolView& pv = I.pool_view;
  pv = {};
  pv.k_base = I.kv_pool.as<uint8_t>();
  pv.v_base = pv.k_base + L.n_layer * layer_bytes;
  pv.layer_stride = layer_bytes;
  pv.v_layer_stride = v_layer_bytes;
  if (I.kv_scales.p) {
    pv.k_scale_base = I.kv_scales.as<float>();
    pv.v_scale_base = pv.k_scale_base + L.n_layer * vectors_per_layer;
    pv.scale_layer_stride = vectors_per_layer;
  }
  pv.n_layer = L.n_layer;
  pv.kv = {L.n_head_kv, L.head_dim, L.block_size, L.num_blocks, I.codec};
  pv.kv.packed = I.packed;
  pv.kv.group = kv_effective_group(L.quant_group, L.head_dim);
  for (int v = 0; v < 2; ++v) pv.kv.row_bytes[v] = row_bytes[v], pv.kv.tile_bytes[v] = tile_bytes[v];
  I.layout = L;
  I.point_residual();
  I.policy = policy;
  I.sink_rope.release();
  I.sink_rope_rows = 0;
  if (I.sink_mode()) {
    const int64_t rows = static_cast<int64_t>(policy.sinks) + policy.window;
    std::vector<float> cs(static_cast<size_t>(2 * rows * c.rope_dim));
    const float bases[2] = {c.rope_base, c.rope_base_swa};
    for (int b = 0; b < 2; ++b)
      for (int64_t p = 0; p < rows; ++p)
        kvmath::rope_cos_sin(c.rope_dim, static_cast<int32_t>(p), bases[b], c.rope_freq_scale,
                             &cs[static_cast<size_t>((b * rows + p) * c.rope_dim)]);
    I.sink_rope.ensure(cs.size() * sizeof(float), "the attention-sink RoPE table");
    KVSCOPE_CUDA_CHECK(cudaMemcpy(I.sink_rope.p, cs.data(), cs.size() * sizeof(float), cudaMemcpyHostToDevice));
    I.sink_rope_rows = rows;
  }
}

void CudaBackend::copy_blocks(std::span<const BlockCopy> copies) {
  Impl& I = *impl_;
  if (copies.empty()) return;
  if (!I.kv_pool.p) throw std::logic_error("copy_blocks before init_kv");
  KVSCOPE_CUDA_CHECK(cudaSetDevice(I.device));
  const size_t bytes = copies.size() * 3 * sizeof(int32_t);
  KVSCOPE_CUDA_CHECK(cudaStreamSynchronize(I.stream));  // the pinned buffer may still be in flight
  I.copies_host.ensure(bytes);
  I.copies_dev.ensure(bytes, "block copies");
  auto* h = static_cast<int32_t*>(I.copies_host.p);
  for (size_t i = 0; i < copies.size(); ++i) {
    const BlockCopy& cp = copies[i];
    KV_CHECK(cp.group == 0, "copy_blocks: the CUDA backend stores one KV group (no hybrid KV cache)");
    KV_CHECK(cp.src >= 0 && cp.src < I.layout.num_blocks && cp.dst >= 0 && cp.dst < I.layout.num_blocks,
             "copy_blocks: block id outside the pool");
    KV_CHECK(cp.n_slots >= 0 && cp.n_slots <= I.layout.block_size, "copy_blocks: n_slots outside [0, block_size]");
    h[3 * i] = cp.src;
    h[3 * i + 1] = cp.dst;
    h[3 * i + 2] = cp.n_slots;
  }
  // KIVI: a copy of a block being filled takes its residual rows along; a copy of a full block
  // leaves none at the destination (CpuKvStorage::copy_residual).
  for (size_t i = 0; I.kivi() && i < copies.size(); ++i) {
    const int32_t rs = I.res_of_block[static_cast<size_t>(copies[i].src)];
    if (rs < 0) {
      I.release_residual(copies[i].dst);
      continue;
    }
    int32_t rd = I.res_of_block[static_cast<size_t>(copies[i].dst)];
    if (rd < 0) rd = I.take_residual(copies[i].dst);
    KVSCOPE_CUDA_CHECK(cudaMemcpyAsync(I.residual.as<uint16_t>() + rd * I.res_slot_elems,
                                       I.residual.as<uint16_t>() + rs * I.res_slot_elems,
                                       static_cast<size_t>(I.res_slot_elems) * 2, cudaMemcpyDeviceToDevice, I.stream));
  }
  KVSCOPE_CUDA_CHECK(cudaMemcpyAsync(I.copies_dev.p, h, bytes, cudaMemcpyHostToDevice, I.stream));
  cuda::launch_copy_blocks(I.pool_view, I.copies_dev.as<int32_t>(), static_cast<int32_t>(copies.size()), I.stream);
  KVSCOPE_CUDA_CHECK(cudaGetLastError());
}

// ---- the step ------------------------------------------------------------------------------------

void CudaBackend::forward(const BatchView& batch, float* logits_out) {
  Impl& I = *impl_;
  const ModelConfig& c = I.model->config;
  const int32_t n = batch.n_tokens();
  if (n == 0) return;
  if (!I.kv_pool.p) throw std::logic_error("forward before init_kv");
  const KvLayout& L = I.layout;
  const size_t un = static_cast<size_t>(n);
  if (batch.positions.size() != un || batch.slot_mapping.size() != un || batch.seq_index.size() != un)
    throw std::invalid_argument("BatchView: tokens, positions, slot_mapping and seq_index differ in length");
  if (batch.n_groups() != 1)
    throw std::invalid_argument("the CUDA backend stores one KV group: run without the hybrid KV cache (--hybrid-kv off)");
  const int32_t n_seqs = static_cast<int32_t>(batch.block_tables.size());
  const int32_t n_out = static_cast<int32_t>(batch.logits_rows.size());
  const int64_t n_slots_total = static_cast<int64_t>(L.num_blocks) * L.block_size;
  for (int32_t t = 0; t < n; ++t) {
    const TokenId id = batch.tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= c.n_vocab) throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary");
    const int32_t si = batch.seq_index[static_cast<size_t>(t)];
    KV_CHECK(si >= 0 && si < n_seqs, "BatchView: seq_index outside block_tables");
    const int64_t slot = batch.slot_mapping[static_cast<size_t>(t)];
    KV_CHECK(slot >= 0 && slot < n_slots_total, "BatchView: slot outside the KV pool");
    KV_CHECK(batch.positions[static_cast<size_t>(t)] >= 0, "BatchView: negative position");
  }
  for (int32_t r = 0; r < n_out; ++r) {
    const int32_t t = batch.logits_rows[static_cast<size_t>(r)];
    KV_CHECK(t >= 0 && t < n, "BatchView: logits row outside the batch");
  }

  // Work lists: a run of consecutive positions of one sequence (a prompt chunk) goes to the
  // prefill kernel in tiles; a lone token (decode) to the split-K decode kernel.
  std::vector<int32_t> decode_tokens, tiles;
  for (int32_t t = 0; t < n;) {
    int32_t e = t + 1;
    while (e < n && batch.seq_index[static_cast<size_t>(e)] == batch.seq_index[static_cast<size_t>(t)] &&
           batch.positions[static_cast<size_t>(e)] == batch.positions[static_cast<size_t>(e - 1)] + 1)
      ++e;
    if (e - t == 1) {
      decode_tokens.push_back(t);
    } else {
      for (int32_t s = t; s < e; s += cuda::kPrefillTile) {
        tiles.push_back(s);
        tiles.push_back(std::min(cuda::kPrefillTile, e - s));
      }
    }
    t = e;
  }
  const int32_t n_dec = static_cast<int32_t>(decode_tokens.size());
  const int32_t n_tiles = static_cast<int32_t>(tiles.size() / 2);

  KVSCOPE_CUDA_CHECK(cudaSetDevice(I.device));
  std::vector<int32_t> res_slot, complete;
  if (I.kivi()) I.plan_residual(batch, &res_slot, &complete);
  const size_t n_res = res_slot.size(), n_map = I.kivi() ? I.res_of_block.size() : 0;

  // Pack the step into one pinned buffer: int64 slots first (alignment), then int32 arrays.
  int64_t table_total = 0;
  for (const auto& tb : batch.block_tables) table_total += static_cast<int64_t>(tb.size());
  const size_t n32 = 3 * un + static_cast<size_t>(n_seqs + 1) + static_cast<size_t>(table_total) +
                     static_cast<size_t>(n_out) + decode_tokens.size() + tiles.size() + n_res + complete.size() + n_map;
  const size_t bytes = un * sizeof(int64_t) + n32 * sizeof(int32_t);
  KVSCOPE_CUDA_CHECK(cudaSetDevice(I.device));
  KVSCOPE_CUDA_CHECK(cudaStreamSynchronize(I.stream));  // the previous step's upload is done with the buffer
  I.step_host.ensure(bytes);
  I.step_dev.ensure(bytes, "the step upload");
  auto* h64 = static_cast<int64_t*>(I.step_host.p);
  std::memcpy(h64, batch.slot_mapping.data(), un * sizeof(int64_t));
  auto* h32 = reinterpret_cast<int32_t*>(h64 + un);
  size_t at = 0;
  auto put = [&](const int32_t* src, size_t count) {
    const size_t off = at;
    if (count) std::memcpy(h32 + at, src, count * sizeof(int32_t));
    at += count;
    return off;
  };
  const size_t o_tokens = put(batch.tokens.data(), un);
  const size_t o_pos = put(batch.positions.data(), un);
  const size_t o_seq = put(batch.seq_index.data(), un);
  const size_t o_toff = at;
  {
    int32_t acc = 0;
    for (int32_t s = 0; s <= n_seqs; ++s) {
      h32[at++] = acc;
      if (s < n_seqs) acc += static_cast<int32_t>(batch.block_tables[static_cast<size_t>(s)].size());
    }
  }
  const size_t o_tables = at;
  for (const auto& tb : batch.block_tables) put(tb.data(), tb.size());
  const size_t o_rows = put(batch.logits_rows.data(), static_cast<size_t>(n_out));
  const size_t o_dec = put(decode_tokens.data(), decode_tokens.size());
  const size_t o_tiles = put(tiles.data(), tiles.size());
  const size_t o_res = put(res_slot.data(), n_res);
  const size_t o_complete = put(complete.data(), complete.size());
  const size_t o_map = put(I.res_of_block.data(), n_map);  // completed blocks still at their slots
  if (I.kivi()) I.release_completed(complete);
  KVSCOPE_CUDA_CHECK(cudaMemcpyAsync(I.step_dev.p, I.step_host.p, bytes, cudaMemcpyHostToDevice, I.stream));
  const auto* d64 = I.step_dev.as<const int64_t>();
  const auto* d32 = reinterpret_cast<const int32_t*>(d64 + un);
  cuda::StepPtrs sp;
  sp.slot_mapping = d64;
  sp.tokens = d32 + o_tokens;
  sp.positions = d32 + o_pos;
  sp.seq_index = d32 + o_seq;
  sp.table_offsets = d32 + o_toff;
  sp.tables = d32 + o_tables;
  sp.logits_rows = d32 + o_rows;
  sp.decode_tokens = d32 + o_dec;
  sp.prefill_tiles = d32 + o_tiles;
  sp.n_tokens = n;
  sp.n_seqs = n_seqs;
  sp.n_out = n_out;
  sp.n_decode = n_dec;
  sp.n_tiles = n_tiles;
  if (I.kivi()) {
    sp.res_slot = d32 + o_res;
    sp.kivi_complete = d32 + o_complete;
    sp.n_complete = static_cast<int32_t>(complete.size() / 2);
  }
  cuda::KvGeometry geom = I.pool_view.kv;
  if (I.kivi()) geom.res_of_block = d32 + o_map;

  // Split-K partitions per window value (a model's SWA layers need fewer).
  std::map<std::pair<int32_t, int32_t>, int32_t> parts_for_window;  // (window, sinks) -> partitions
  auto max_parts = [&](int32_t window, int32_t sinks) {
    auto it = parts_for_window.find({window, sinks});
    if (it != parts_for_window.end()) return it->second;
    int32_t m = 0;
    for (int32_t t : decode_tokens) {
      const auto vr = kvmath::visible_range(batch.positions[static_cast<size_t>(t)], window, sinks);
      m = std::max(m, kvmath::num_partitions(vr.count(), cuda::kDecodePartition));
    }
    parts_for_window[{window, sinks}] = m;
    return m;
  };
  int32_t part_stride = 0;
  for (int32_t il = 0; il < c.n_layer; ++il) part_stride = std::max(part_stride, max_parts(I.layer_window(il), I.layer_sinks(il)));

  // Activation buffers.
  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, V = c.n_vocab;
  const size_t ab = I.act_bytes;
  I.x.ensure(un * E * 4, "activations");
  I.xn.ensure(un * std::max({E, Q, F}) * ab, "activations");
  I.qkv.ensure(un * (Q + 2 * KV) * 4, "activations");
  I.att.ensure(un * Q * ab, "activations");
  I.o.ensure(un * E * 4, "activations");
  I.gu.ensure(un * 2 * F * 4, "activations");
  I.h.ensure(un * F * ab, "activations");
  if (n_out > 0) I.logits.ensure(static_cast<size_t>(n_out) * V * 4, "logits");
  const int64_t ws_floats = cuda::attention_workspace_floats(n_dec, c.n_head, part_stride, c.head_dim);
  if (ws_floats > 0) I.attn_ws.ensure(static_cast<size_t>(ws_floats) * 4, "attention split-K workspace");

  float* x = I.x.as<float>();
  float* o = I.o.as<float>();
  float* qkv = I.qkv.as<float>();
  float* gu = I.gu.as<float>();
  int32_t* err = I.error_dev.as<int32_t>();
  const bool gelu = c.traits.act == FfnActivation::GeluTanh;

  cuda::launch_embed(I.act, I.tok_embd.p, sp.tokens, n, c.n_embd, c.traits.embed_scale, x, I.stream);
  cuda::launch_residual_norm(I.act, x, nullptr, nullptr, I.layers[0].attn_norm.as<float>(), I.xn.p, nullptr, n,
                             c.n_embd, c.rms_eps, I.stream);
  for (int32_t il = 0; il < c.n_layer; ++il) {
    Impl::Layer& W = I.layers[static_cast<size_t>(il)];
    I.gemm(W.wqkv.p, Q + 2 * KV, E, I.xn.p, n, qkv);

    cuda::QkvParams qp;
    qp.qkv = qkv;
    qp.bias = W.bqkv.as<float>();
    qp.q_norm = W.q_norm.as<float>();
    qp.k_norm = W.k_norm.as<float>();
    qp.positions = sp.positions;
    qp.slot_mapping = sp.slot_mapping;
    qp.res_slot = sp.res_slot;
    qp.n_tokens = n;
    qp.n_head = c.n_head;
    qp.rope_dim = c.rope_dim;
    qp.neox = c.traits.rope == RopeStyle::Neox;
    qp.rope = !I.sink_mode();
    qp.rope_base = c.layer_is_swa(il) ? c.rope_base_swa : c.rope_base;
    qp.rope_freq_scale = c.rope_freq_scale;
    qp.eps = c.rms_eps;
    qp.kv = geom;
    qp.k = I.pool_view.layer(il, false);
    qp.v = I.pool_view.layer(il, true);
    qp.error = err;
    // Every token's K/V is stored before this layer's attention runs (stream order), so the
    // tokens of a prompt chunk see each other.
    cuda::launch_qkv_rope_store(qp, I.stream);

    cuda::AttnParams ap;
    ap.q = qkv;
    ap.q_stride = static_cast<int32_t>(Q + 2 * KV);
    ap.out = I.att.p;
    ap.out_stride = static_cast<int32_t>(Q);
    ap.k = qp.k;
    ap.v = qp.v;
    ap.kv = qp.kv;
    ap.n_head = c.n_head;
    ap.window = I.layer_window(il);
    ap.sinks = I.layer_sinks(il);
    ap.scale = c.attn_scale;
    if (I.sink_mode()) {
      ap.sink_rope = I.sink_rope.as<float>() + (c.layer_is_swa(il) ? I.sink_rope_rows * c.rope_dim : 0);
      ap.rope_dim = c.rope_dim;
      ap.neox = qp.neox;
    }
    ap.step = sp;
    ap.part_stride = part_stride;
    ap.max_parts = max_parts(ap.window, ap.sinks);
    if (ws_floats > 0) {
      ap.part_ml = I.attn_ws.as<float>();
      ap.part_o = ap.part_ml + static_cast<int64_t>(n_dec) * c.n_head * part_stride * 2;
    }
    ap.error = err;
    if (I.packed != PackedKv::None) cuda::launch_attention_packed(I.act, ap, I.stream);
    else cuda::launch_attention(I.act, ap, I.stream);
    // Blocks this step filled are quantized once its attention has read them in f16.
    cuda::launch_kivi_complete(qp.kv, qp.k, qp.v, sp, I.stream);

    I.gemm(W.wo.p, E, Q, I.att.p, n, o);
    cuda::launch_residual_norm(I.act, x, o, W.post_attn_norm.as<float>(), W.ffn_norm.as<float>(), I.xn.p, nullptr, n,
                               c.n_embd, c.rms_eps, I.stream);
    I.gemm(W.wgu.p, 2 * F, E, I.xn.p, n, gu);
    cuda::launch_gated_act(I.act, gelu, gu, I.h.p, n, c.n_ff, I.stream);
    I.gemm(W.wdown.p, E, F, I.h.p, n, o);
    const float* next_norm = il + 1 < c.n_layer ? I.layers[static_cast<size_t>(il + 1)].attn_norm.as<float>() : nullptr;
    cuda::launch_residual_norm(I.act, x, o, W.post_ffw_norm.as<float>(), next_norm, I.xn.p, nullptr, n, c.n_embd,
                               c.rms_eps, I.stream);
  }
  KVSCOPE_CUDA_CHECK(cudaGetLastError());

  // Only the rows whose logits are wanted go through the output matrix and back to the host.
  if (n_out > 0) {
    cuda::launch_residual_norm(I.act, x, nullptr, nullptr, I.output_norm.as<float>(), I.xn.p, sp.logits_rows, n_out,
                               c.n_embd, c.rms_eps, I.stream);
    I.gemm(I.output_ptr, V, E, I.xn.p, n_out, I.logits.as<float>());
    KVSCOPE_CUDA_CHECK(cudaMemcpyAsync(logits_out, I.logits.p, static_cast<size_t>(n_out) * V * 4,
                                       cudaMemcpyDeviceToHost, I.stream));
  }
  KVSCOPE_CUDA_CHECK(cudaMemcpyAsync(I.error_host.p, err, sizeof(int32_t), cudaMemcpyDeviceToHost, I.stream));
  KVSCOPE_CUDA_CHECK(cudaStreamSynchronize(I.stream));
  const int32_t code = *static_cast<int32_t*>(I.error_host.p);
  if (code != cuda::kErrNone) {
    KVSCOPE_CUDA_CHECK(cudaMemset(err, 0, sizeof(int32_t)));
    const char* what = code == cuda::kErrDroppedBlock   ? "attention reached a dropped block (kNoBlock)"
                       : code == cuda::kErrTableOverrun ? "a visible position lies past the block table"
                                                        : "a slot or block id lies outside the KV pool";
    throw std::logic_error(std::string("CUDA backend: ") + what);
  }
}

}  // namespace kvscope
