// CudaBackend: host side of the CUDA backend. This file: construction, the KV pool and block
// copies; the weight upload is in cuda_weights.cu, the step (forward) in cuda_forward.cu, the
// shared state in cuda_backend_impl.cuh. The math of each step lives in cuda_kernels.cu /
// cuda_attention.cu / cuda_packed.cu and in cuBLAS.
//
// Weights: every matrix is dequantized on the host (dequantize_row, whatever its GGUF type) and
// uploaded once as f16 -- bf16 when the model's matrices are bf16 -- so one GEMM path
// (cublasGemmEx, f16/bf16 inputs, f32 accumulate and output, tensor cores) serves every file.
// q/k/v are packed into one [q_dim + 2 kv_dim][n_embd] matrix and gate/up into one [2 n_ff][n_embd]
// matrix: one GEMM each.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_backend_impl.cuh"
#include "cuda_model_support.h"

namespace kvscope {

namespace {

// The packed 4/2-bit dtypes: tiles of codes and f16 parameters (cuda_packed.cu), not an element
// codec. None for every other dtype.
PackedKv packed_for(KvDtype t) {
  switch (t) {
    case KvDtype::INT4:
      return PackedKv::INT4;
    case KvDtype::ROT4:
      return PackedKv::ROT4;
    case KvDtype::KIVI4:
      return PackedKv::KIVI4;
    case KvDtype::KIVI2:
      return PackedKv::KIVI2;
    default:
      return PackedKv::None;
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

}  // namespace

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
  if (const std::string missing = cuda_missing_piece(*I.model); !missing.empty())
    throw std::invalid_argument("CUDA backend: " + missing + "; use --backend cpu");
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
  for (const Impl::DevBuf* b : {&I.step_dev, &I.x, &I.xn, &I.qkv, &I.att, &I.o, &I.gu, &I.h, &I.logits, &I.attn_ws})
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
  const double budget =
      fraction * static_cast<double>(total_b) - in_use - static_cast<double>(activation_reserve_bytes());
  KvLayout L = layout;
  L.num_blocks = 1;
  const double per_block = static_cast<double>(L.bytes_per_block());
  if (budget <= 0 || per_block <= 0) return 0;
  return static_cast<int32_t>(std::min(budget / per_block, 2147483647.0));
}

namespace {
// What init_kv refuses before touching the device.
void check_kv_request(const ModelConfig& c, const KvLayout& layout_in, const AttentionPolicy& policy) {
  if (layout_in.n_layer != c.n_layer || layout_in.n_head_kv != c.n_head_kv || layout_in.head_dim != c.head_dim)
    throw std::invalid_argument("KV layout does not match the model");
  if (layout_in.block_size <= 0) throw std::invalid_argument("KV layout: block_size must be positive");
  // supports_kivi_residual() is false (the engine refuses it first); this guards direct callers.
  if (layout_in.kivi_residual > 0)
    throw std::invalid_argument(
        "the CUDA backend keeps only the block being filled in f16 (no --kivi-residual): use --kivi-residual 0 or --backend cpu");
  // As CpuBackend: sinks need a window, and switch RoPE to cache positions (StreamingLLM).
  if (policy.window < 0 || policy.sinks < 0) throw std::invalid_argument("window and sinks must not be negative");
  if (policy.sinks > 0 && policy.window == 0) throw std::invalid_argument("attention sinks need a sliding window");
  if (policy.sinks > 0 && c.traits.rope == RopeStyle::Neox && c.rope_dim % 16 != 0)
    throw std::invalid_argument("CUDA backend: attention sinks with NEOX RoPE need rope_dim a multiple of 16");
}
}  // namespace

void CudaBackend::init_kv(const KvLayout& layout_in, const AttentionPolicy& policy) {
  Impl& I = *impl_;
  check_kv_request(I.model->config, layout_in, policy);
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
  I.allocate_kv_pool(L);
  I.layout = L;
  I.point_residual();
  I.policy = policy;
  I.build_sink_rope();
}

// The pool (and its scales) for layout L, zeroed, and pool_view pointing into it.
void CudaBackend::Impl::allocate_kv_pool(const KvLayout& L) {
  kv_pool.release();
  kv_scales.release();
  residual.release();
  res_capacity = res_used = res_in_use = res_peak = 0;
  res_free.clear();
  res_of_block.assign(kivi() ? static_cast<size_t>(L.num_blocks) : 0, -1);
  res_slot_elems = 2LL * L.n_layer * L.n_head_kv * L.block_size * L.head_dim;
  const int64_t elem = cuda::kv_codec_elem_bytes(codec);
  const int64_t vectors_per_layer = static_cast<int64_t>(L.num_blocks) * L.n_head_kv * L.block_size;
  // Packed: per layer num_blocks * n_kv tiles of tile_bytes (K and V differ for KIVI).
  int64_t tile_bytes[2] = {0, 0}, row_bytes[2] = {0, 0};
  for (int v = 0; v < 2; ++v) {
    row_bytes[v] = kv_row_bytes(L.dtype, v, L.head_dim, L.quant_group);
    tile_bytes[v] = row_bytes[v] * L.block_size + kv_tile_extra_bytes(L.dtype, v, L.head_dim, L.block_size);
  }
  const int64_t tiles_per_layer = static_cast<int64_t>(L.num_blocks) * L.n_head_kv;
  const int64_t layer_bytes =
      packed != PackedKv::None ? tiles_per_layer * tile_bytes[0] : vectors_per_layer * L.head_dim * elem;
  const int64_t v_layer_bytes = packed != PackedKv::None ? tiles_per_layer * tile_bytes[1] : layer_bytes;
  try {
    kv_pool.ensure(static_cast<size_t>(L.n_layer * (layer_bytes + v_layer_bytes)), "the KV cache");
    if (cuda::kv_codec_scaled(codec))
      kv_scales.ensure(static_cast<size_t>(2 * L.n_layer * vectors_per_layer) * sizeof(float), "the KV scales");
  } catch (const std::runtime_error&) {
    kv_pool.release();
    throw std::runtime_error("cannot allocate the KV cache: " + std::to_string(L.total_bytes() >> 20) +
                             " MiB requested for " + std::to_string(L.num_blocks) + " blocks on " + device_name);
  }
  KVSCOPE_CUDA_CHECK(cudaMemset(kv_pool.p, 0, kv_pool.cap));
  if (kv_scales.p) KVSCOPE_CUDA_CHECK(cudaMemset(kv_scales.p, 0, kv_scales.cap));
  cuda::KvPoolView& pv = pool_view;
  pv = {};
  pv.k_base = kv_pool.as<uint8_t>();
  pv.v_base = pv.k_base + L.n_layer * layer_bytes;
  pv.layer_stride = layer_bytes;
  pv.v_layer_stride = v_layer_bytes;
  if (kv_scales.p) {
    pv.k_scale_base = kv_scales.as<float>();
    pv.v_scale_base = pv.k_scale_base + L.n_layer * vectors_per_layer;
    pv.scale_layer_stride = vectors_per_layer;
  }
  pv.n_layer = L.n_layer;
  pv.kv = {L.n_head_kv, L.head_dim, L.block_size, L.num_blocks, codec};
  pv.kv.packed = packed;
  pv.kv.group = kv_effective_group(L.quant_group, L.head_dim);
  for (int v = 0; v < 2; ++v) pv.kv.row_bytes[v] = row_bytes[v], pv.kv.tile_bytes[v] = tile_bytes[v];
}

// Sink mode: cos/sin of cache positions for both RoPE bases (none otherwise).
void CudaBackend::Impl::build_sink_rope() {
  const ModelConfig& c = model->config;
  sink_rope.release();
  sink_rope_rows = 0;
  if (!sink_mode()) return;
  const int64_t rows = static_cast<int64_t>(policy.sinks) + policy.window;
  std::vector<float> cs(static_cast<size_t>(2 * rows * c.rope_dim));
  const float bases[2] = {c.rope_base, c.rope_base_swa};
  for (int b = 0; b < 2; ++b)
    for (int64_t p = 0; p < rows; ++p)
      kvmath::rope_cos_sin(c.rope_dim, static_cast<int32_t>(p), bases[b], c.rope_freq_scale,
                           &cs[static_cast<size_t>((b * rows + p) * c.rope_dim)]);
  sink_rope.ensure(cs.size() * sizeof(float), "the attention-sink RoPE table");
  KVSCOPE_CUDA_CHECK(cudaMemcpy(sink_rope.p, cs.data(), cs.size() * sizeof(float), cudaMemcpyHostToDevice));
  sink_rope_rows = rows;
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
}  // namespace kvscope
