// kvscope-cuda-bench: short GPU benchmark of the CUDA backend, written as one JSON report.
//  1. device: name, SMs, peak memory bandwidth (from clock x bus width) and measured D2D copy bandwidth;
//  2. paged-attention decode kernel alone: batch 16, 4K and 32K context, 32 q heads / 8 kv heads,
//     head_dim 128, block 16, shuffled blocks; f16 KV and fp8 e4m3 KV; time and achieved bandwidth
//     (KV bytes that must be read / kernel time);
//  3. GEMM-bound decode estimate of a 1B llama (n_embd 2048, n_ff 8192, 16 layers, 32/8 heads,
//     vocab 32000): cublasGemmEx time of one step's matrices at batch 1/16/64;
//  4. end to end: CudaBackend decode tokens/s on a synthetic 1B llama (f16 GGUF, generated once
//     into --model's path unless it exists) at batch 1/16/64, 128-token prompts.
// Usage: kvscope-cuda-bench [--out report.json] [--model path.gguf] [--no-e2e] [--quick]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "model/model.h"
#include "model/synthetic_model.h"

using namespace kvscope;
using namespace kvscope::cuda;
using json = nlohmann::json;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Times `iters` calls of fn on the stream with events; returns seconds per call.
template <typename F>
double time_gpu(cudaStream_t s, int warmup, int iters, F&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  KVSCOPE_CUDA_CHECK(cudaEventCreate(&a));
  KVSCOPE_CUDA_CHECK(cudaEventCreate(&b));
  KVSCOPE_CUDA_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) fn();
  KVSCOPE_CUDA_CHECK(cudaEventRecord(b, s));
  KVSCOPE_CUDA_CHECK(cudaEventSynchronize(b));
  KVSCOPE_CUDA_CHECK(cudaGetLastError());
  float ms = 0;
  KVSCOPE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1e-3 / iters;
}

__device__ inline float hash_unit(uint64_t i) {  // deterministic pseudo-random in [-1, 1)
  i ^= i >> 33;
  i *= 0xff51afd7ed558ccdULL;
  i ^= i >> 33;
  i *= 0xc4ceb9fe1a85ec53ULL;
  i ^= i >> 33;
  return static_cast<float>(i >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

template <KvCodecId C>
__global__ void fill_codec(void* dst, int64_t n, uint64_t seed) {
  using Cd = Codec<C>;
  auto* d = static_cast<typename Cd::T*>(dst);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    d[i] = Cd::encode(hash_unit(seed * 0x9E3779B97F4A7C15ULL + i) * (Cd::kScaled ? Cd::kQmax : 1.0f));
}

__global__ void fill_f32(float* dst, int64_t n, uint64_t seed, float scale, float offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = offset + scale * hash_unit(seed * 0x9E3779B97F4A7C15ULL + i);
}

__global__ void fill_half(__half* dst, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __float2half_rn(scale * hash_unit(seed * 0x9E3779B97F4A7C15ULL + i));
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { KVSCOPE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

json device_info(double* peak_bw, double* copy_bw, cudaStream_t s) {
  int dev = 0;
  cudaDeviceProp prop{};
  KVSCOPE_CUDA_CHECK(cudaGetDevice(&dev));
  KVSCOPE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  int mem_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev);
  *peak_bw = 2.0 * mem_khz * 1e3 * bus_bits / 8.0;  // DDR: two transfers per clock
  const size_t bytes = size_t{1} << 30;
  Dev a(bytes), b(bytes);
  KVSCOPE_CUDA_CHECK(cudaMemsetAsync(a.p, 1, bytes, s));
  const double t = time_gpu(s, 2, 10, [&] { cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s); });
  *copy_bw = 2.0 * bytes / t;  // read + write
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return {{"name", prop.name},
          {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
          {"sms", prop.multiProcessorCount},
          {"memory_gib", total_b / double(1 << 30)},
          {"peak_bandwidth_gbs", *peak_bw / 1e9},
          {"d2d_copy_bandwidth_gbs", *copy_bw / 1e9}};
}

// Paged-attention decode kernel alone on one layer's pool.
// long-function: one measurement as a script (set up, warm, time, report), like the others here.
json bench_attention(KvCodecId codec, int32_t ctx, int32_t batch, double peak_bw, double copy_bw, cudaStream_t s,
                     bool quick) {
  const int32_t n_head = 32, n_kv = 8, D = 128, bs = 16;
  const int32_t blocks_per_seq = (ctx + bs - 1) / bs;
  const int32_t num_blocks = batch * blocks_per_seq;
  const int64_t vectors = static_cast<int64_t>(num_blocks) * n_kv * bs;
  const int64_t elem = kv_codec_elem_bytes(codec);
  Dev k(vectors * D * elem), v(vectors * D * elem);
  const bool scaled = kv_codec_scaled(codec);
  Dev ks(scaled ? vectors * 4 : 0), vs(scaled ? vectors * 4 : 0);
  dispatch_codec(codec, [&]<KvCodecId C>() {
    fill_codec<C><<<1024, 256, 0, s>>>(k.p, vectors * D, 1);
    fill_codec<C><<<1024, 256, 0, s>>>(v.p, vectors * D, 2);
  });
  if (scaled) {
    fill_f32<<<1024, 256, 0, s>>>(ks.as<float>(), vectors, 3, 0.0f, 1.0f / 448.0f);
    fill_f32<<<1024, 256, 0, s>>>(vs.as<float>(), vectors, 4, 0.0f, 1.0f / 448.0f);
  }
  // Step: batch decode tokens at position ctx - 1, each sequence with its own shuffled blocks.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(42));
  std::vector<int32_t> pos(batch, ctx - 1), seq(batch), offsets(batch + 1), dec(batch);
  std::vector<int64_t> slots(batch);
  for (int32_t b = 0; b < batch; ++b) {
    seq[b] = b;
    dec[b] = b;
    offsets[b] = b * blocks_per_seq;
    slots[b] =
        static_cast<int64_t>(perm[static_cast<size_t>(b * blocks_per_seq + (ctx - 1) / bs)]) * bs + (ctx - 1) % bs;
  }
  offsets[batch] = batch * blocks_per_seq;
  Dev d_pos(batch * 4), d_seq(batch * 4), d_off((batch + 1) * 4), d_tab(num_blocks * 4), d_dec(batch * 4),
      d_slots(batch * 8);
  cudaMemcpy(d_pos.p, pos.data(), batch * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_seq.p, seq.data(), batch * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_off.p, offsets.data(), (batch + 1) * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_tab.p, perm.data(), num_blocks * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_dec.p, dec.data(), batch * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_slots.p, slots.data(), batch * 8, cudaMemcpyHostToDevice);
  Dev q(static_cast<size_t>(batch) * n_head * D * 4), out(static_cast<size_t>(batch) * n_head * D * 2);
  fill_f32<<<256, 256, 0, s>>>(q.as<float>(), static_cast<int64_t>(batch) * n_head * D, 5, 1.0f, 0.0f);
  const int32_t parts = kvmath::num_partitions(ctx, kDecodePartition);
  Dev ws(attention_workspace_floats(batch, n_head, parts, D) * 4);
  Dev err(4);
  cudaMemsetAsync(err.p, 0, 4, s);

  AttnParams p;
  p.q = q.as<float>();
  p.q_stride = n_head * D;
  p.out = out.p;
  p.out_stride = n_head * D;
  p.k = {k.p, scaled ? ks.as<float>() : nullptr};
  p.v = {v.p, scaled ? vs.as<float>() : nullptr};
  p.kv = {n_kv, D, bs, num_blocks, codec};
  p.n_head = n_head;
  p.scale = 1.0f / std::sqrt(static_cast<float>(D));
  p.step.positions = d_pos.as<int32_t>();
  p.step.seq_index = d_seq.as<int32_t>();
  p.step.table_offsets = d_off.as<int32_t>();
  p.step.tables = d_tab.as<int32_t>();
  p.step.decode_tokens = d_dec.as<int32_t>();
  p.step.slot_mapping = d_slots.as<int64_t>();
  p.step.n_tokens = batch;
  p.step.n_seqs = batch;
  p.step.n_decode = batch;
  p.part_ml = ws.as<float>();
  p.part_o = p.part_ml + static_cast<int64_t>(batch) * n_head * parts * 2;
  p.part_stride = parts;
  p.max_parts = parts;
  p.error = err.as<int32_t>();
  const int iters = quick ? 5 : (ctx > 8192 ? 20 : 50);
  const double t = time_gpu(s, 3, iters, [&] { launch_attention_decode(ActType::F16, p, s); });
  int32_t e = 0;
  cudaMemcpy(&e, err.p, 4, cudaMemcpyDeviceToHost);
  const double kv_bytes =
      2.0 * batch * static_cast<double>(ctx) * n_kv * D * elem + (scaled ? 2.0 * batch * ctx * n_kv * 4 : 0);
  const double bw = kv_bytes / t;
  std::printf("attention decode %-8s ctx %6d batch %d: %8.1f us, %7.1f GB/s (%.0f%% of peak, %.0f%% of copy)%s\n",
              kv_codec_name(codec), ctx, batch, t * 1e6, bw / 1e9, 100 * bw / peak_bw, 100 * bw / copy_bw,
              e ? " KERNEL ERROR" : "");
  return {{"kv_dtype", kv_codec_name(codec)},
          {"context", ctx},
          {"batch", batch},
          {"n_head", n_head},
          {"n_head_kv", n_kv},
          {"head_dim", D},
          {"block_size", bs},
          {"partitions", parts},
          {"time_us", t * 1e6},
          {"kv_bytes", kv_bytes},
          {"bandwidth_gbs", bw / 1e9},
          {"fraction_of_peak", bw / peak_bw},
          {"fraction_of_copy", bw / copy_bw},
          {"kernel_error", e}};
}

// The packed-KV attention kernel (cuda_packed.cu) on the same shape at batch 16: every visible
// element is decoded in the loop, so this is compute-bound, not a bandwidth figure to compare
// with f16's; reported with the bytes it reads. Tiles hold a constant byte pattern (valid f16
// parameters, KIVI blocks all quantized): the timing does not depend on the values.
json bench_attention_packed(KvDtype dtype, PackedKv packed, int32_t ctx, cudaStream_t s, bool quick) {
  const int32_t n_head = 32, n_kv = 8, D = 128, bs = 16, batch = 16;
  const int32_t blocks_per_seq = (ctx + bs - 1) / bs, num_blocks = batch * blocks_per_seq;
  KvGeometry g{n_kv, D, bs, num_blocks, KvCodecId::F32};
  g.packed = packed;
  g.group = kv_effective_group(0, D);
  for (int v = 0; v < 2; ++v) {
    g.row_bytes[v] = kv_row_bytes(dtype, v, D, 0);
    g.tile_bytes[v] = g.row_bytes[v] * bs + kv_tile_extra_bytes(dtype, v, D, bs);
  }
  const int64_t tiles = static_cast<int64_t>(num_blocks) * n_kv;
  Dev k(tiles * g.tile_bytes[0]), v(tiles * g.tile_bytes[1]), map(static_cast<size_t>(num_blocks) * 4);
  cudaMemsetAsync(k.p, 0x11, tiles * g.tile_bytes[0], s);
  cudaMemsetAsync(v.p, 0x11, tiles * g.tile_bytes[1], s);
  cudaMemsetAsync(map.p, 0xFF, static_cast<size_t>(num_blocks) * 4, s);  // -1: no residual
  g.res_of_block = map.as<int32_t>();
  std::vector<int32_t> pos(batch, ctx - 1), seq(batch), offsets(batch + 1), table(static_cast<size_t>(num_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(42));
  for (int32_t b = 0; b < batch; ++b) seq[b] = b, offsets[b] = b * blocks_per_seq;
  offsets[batch] = batch * blocks_per_seq;
  Dev d_pos(batch * 4), d_seq(batch * 4), d_off((batch + 1) * 4), d_tab(num_blocks * 4), err(4);
  cudaMemcpy(d_pos.p, pos.data(), batch * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_seq.p, seq.data(), batch * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_off.p, offsets.data(), (batch + 1) * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(d_tab.p, table.data(), num_blocks * 4, cudaMemcpyHostToDevice);
  cudaMemsetAsync(err.p, 0, 4, s);
  Dev q(static_cast<size_t>(batch) * n_head * D * 4), out(static_cast<size_t>(batch) * n_head * D * 2);
  fill_f32<<<256, 256, 0, s>>>(q.as<float>(), static_cast<int64_t>(batch) * n_head * D, 5, 1.0f, 0.0f);
  AttnParams p;
  p.q = q.as<float>();
  p.q_stride = n_head * D;
  p.out = out.p;
  p.out_stride = n_head * D;
  p.k.data = k.p;
  p.v.data = v.p;
  p.kv = g;
  p.n_head = n_head;
  p.scale = 1.0f / std::sqrt(static_cast<float>(D));
  p.step.positions = d_pos.as<int32_t>();
  p.step.seq_index = d_seq.as<int32_t>();
  p.step.table_offsets = d_off.as<int32_t>();
  p.step.tables = d_tab.as<int32_t>();
  p.step.n_tokens = batch;
  p.step.n_seqs = batch;
  p.error = err.as<int32_t>();
  const double t = time_gpu(s, 2, quick ? 3 : 10, [&] { launch_attention_packed(ActType::F16, p, s); });
  int32_t e = 0;
  cudaMemcpy(&e, err.p, 4, cudaMemcpyDeviceToHost);
  const double kv_bytes = static_cast<double>(batch) * ctx * n_kv * kv_bytes_per_token_head(dtype, D, bs, 0);
  std::printf("attention packed %-6s ctx %6d batch %d: %8.1f us, %7.1f GB/s of packed KV%s\n", kv_dtype_name(dtype),
              ctx, batch, t * 1e6, kv_bytes / t / 1e9, e ? " KERNEL ERROR" : "");
  return {{"kv_dtype", kv_dtype_name(dtype)},
          {"context", ctx},
          {"batch", batch},
          {"time_us", t * 1e6},
          {"kv_bytes", kv_bytes},
          {"bandwidth_gbs", kv_bytes / t / 1e9},
          {"kernel_error", e}};
}

struct LlamaShape {
  int64_t E = 2048, F = 8192, L = 16, H = 32, KVH = 8, D = 64, V = 32000;
  int64_t weight_elems() const { return L * ((H * D + 2 * KVH * D) * E + E * H * D + 3 * E * F) + 2 * V * E; }
};

// cuBLAS time of one decode step's matrix products (no attention, no element-wise kernels).
json bench_gemm(const LlamaShape& m, int32_t batch, double peak_bw, cudaStream_t s, cublasHandle_t h, bool quick) {
  struct Mat {
    int64_t rows, cols;
  };
  const Mat mats[] = {{m.H * m.D + 2 * m.KVH * m.D, m.E}, {m.E, m.H * m.D}, {2 * m.F, m.E}, {m.E, m.F}};
  double step = 0;
  for (const Mat& mt : mats) {
    Dev w(mt.rows * mt.cols * 2), x(static_cast<size_t>(batch) * mt.cols * 2),
        y(static_cast<size_t>(batch) * mt.rows * 4);
    fill_half<<<1024, 256, 0, s>>>(w.as<__half>(), mt.rows * mt.cols, 1, 0.02f);
    fill_half<<<256, 256, 0, s>>>(x.as<__half>(), batch * mt.cols, 2, 1.0f);
    const float one = 1.0f, zero = 0.0f;
    const double t = time_gpu(s, 3, quick ? 5 : 30, [&] {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(mt.rows), batch, static_cast<int>(mt.cols), &one, w.p,
                   CUDA_R_16F, static_cast<int>(mt.cols), x.p, CUDA_R_16F, static_cast<int>(mt.cols), &zero, y.p,
                   CUDA_R_32F, static_cast<int>(mt.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    step += t * m.L;
  }
  {
    Dev w(m.V * m.E * 2), x(static_cast<size_t>(batch) * m.E * 2), y(static_cast<size_t>(batch) * m.V * 4);
    fill_half<<<1024, 256, 0, s>>>(w.as<__half>(), m.V * m.E, 3, 0.02f);
    fill_half<<<256, 256, 0, s>>>(x.as<__half>(), batch * m.E, 4, 1.0f);
    const float one = 1.0f, zero = 0.0f;
    step += time_gpu(s, 3, quick ? 5 : 30, [&] {
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m.V), batch, static_cast<int>(m.E), &one, w.p,
                   CUDA_R_16F, static_cast<int>(m.E), x.p, CUDA_R_16F, static_cast<int>(m.E), &zero, y.p, CUDA_R_32F,
                   static_cast<int>(m.V), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
  }
  const double wbytes = 2.0 * (m.weight_elems() - m.V * m.E);  // the embedding table is gathered, not multiplied
  std::printf("GEMM-bound decode, 1B llama, batch %2d: %7.3f ms/step -> %9.0f tokens/s (weights at peak bw: %.3f ms)\n",
              batch, step * 1e3, batch / step, wbytes / peak_bw * 1e3);
  return {{"batch", batch},
          {"gemm_ms_per_step", step * 1e3},
          {"gemm_bound_tokens_per_s", batch / step},
          {"weight_bytes_read", wbytes},
          {"weights_at_peak_bw_ms", wbytes / peak_bw * 1e3},
          {"gemm_bandwidth_gbs", wbytes / step / 1e9}};
}

// The whole backend: prefill 128-token prompts, then time decode steps of `batch` sequences.
json bench_e2e(const std::shared_ptr<const Model>& model, CudaBackend& be, int32_t batch, bool quick) {
  const ModelConfig& c = model->config;
  const int32_t bs = 16, prompt = 128, steps = quick ? 8 : 32, warm = 2;
  const int32_t per_seq = (prompt + warm + steps + bs - 1) / bs;
  std::vector<std::vector<BlockId>> tables(static_cast<size_t>(batch));
  for (int32_t b = 0; b < batch; ++b)
    for (int32_t i = 0; i < per_seq; ++i) tables[static_cast<size_t>(b)].push_back(b * per_seq + i);
  auto slot = [&](int32_t b, int32_t p) {
    return static_cast<int64_t>(tables[static_cast<size_t>(b)][static_cast<size_t>(p / bs)]) * bs + p % bs;
  };
  std::vector<float> logits;
  {
    BatchView v;
    for (int32_t b = 0; b < batch; ++b) {
      v.block_tables.push_back(std::span<const BlockId>(tables[static_cast<size_t>(b)]));
      for (int32_t p = 0; p < prompt; ++p) {
        v.tokens.push_back(3 + (b * 131 + p * 17) % (c.n_vocab - 3));
        v.positions.push_back(p);
        v.slot_mapping.push_back(slot(b, p));
        v.seq_index.push_back(b);
      }
      v.logits_rows.push_back(v.n_tokens() - 1);
    }
    logits.resize(static_cast<size_t>(batch) * c.n_vocab);
    be.forward(v, logits.data());
  }
  double t0 = 0;
  for (int32_t i = 0; i < warm + steps; ++i) {
    if (i == warm) t0 = now_s();
    BatchView v;
    for (int32_t b = 0; b < batch; ++b) {
      const int32_t p = prompt + i;
      v.block_tables.push_back(std::span<const BlockId>(tables[static_cast<size_t>(b)]));
      v.tokens.push_back(3 + (b * 7 + i * 13) % (c.n_vocab - 3));
      v.positions.push_back(p);
      v.slot_mapping.push_back(slot(b, p));
      v.seq_index.push_back(b);
      v.logits_rows.push_back(b);
    }
    be.forward(v, logits.data());
  }
  const double t = (now_s() - t0) / steps;
  std::printf("end-to-end decode (CudaBackend), batch %2d, context ~%d: %7.3f ms/step -> %9.0f tokens/s\n", batch,
              prompt + warm + steps / 2, t * 1e3, batch / t);
  return {
      {"batch", batch}, {"prompt", prompt}, {"steps", steps}, {"ms_per_step", t * 1e3}, {"tokens_per_s", batch / t}};
}

}  // namespace

// long-function: the benchmark's plan, one measurement after another, in the order of its JSON.
int main(int argc, char** argv) {
  std::string out_path = "kvscope-cuda-bench.json";
  std::string model_path = (std::filesystem::temp_directory_path() / "kvscope-synth-llama-1b-f16.gguf").string();
  bool e2e = true, quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc)
      out_path = argv[++i];
    else if (a == "--model" && i + 1 < argc)
      model_path = argv[++i];
    else if (a == "--no-e2e")
      e2e = false;
    else if (a == "--quick")
      quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--out report.json] [--model path.gguf] [--no-e2e] [--quick]\n", argv[0]);
      return 2;
    }
  }
  std::string why;
  if (!cuda_device_available(&why)) {
    std::fprintf(stderr, "kvscope-cuda-bench: %s\n", why.c_str());
    return 77;
  }
  json report;
  try {
    cudaStream_t s;
    KVSCOPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double peak = 0, copy = 0;
    report["device"] = device_info(&peak, &copy, s);
    std::printf("%s: peak %.0f GB/s, D2D copy %.0f GB/s\n", why.c_str(), peak / 1e9, copy / 1e9);

    json att = json::array();
    for (int32_t ctx : {4096, 32768})
      for (KvCodecId c : {KvCodecId::F16, KvCodecId::FP8_E4M3})
        att.push_back(bench_attention(c, ctx, 16, peak, copy, s, quick));
    report["paged_attention_decode"] = att;
    json packed_att = json::array();
    for (auto [t, f] : {std::pair{KvDtype::INT4, PackedKv::INT4}, std::pair{KvDtype::ROT4, PackedKv::ROT4},
                        std::pair{KvDtype::KIVI4, PackedKv::KIVI4}, std::pair{KvDtype::KIVI2, PackedKv::KIVI2}})
      packed_att.push_back(bench_attention_packed(t, f, 4096, s, quick));
    report["paged_attention_packed_decode"] = packed_att;
    report["targets"]["attention_32k_f16_fraction_of_peak_min"] = 0.70;

    cublasHandle_t h;
    KVSCOPE_CUBLAS_CHECK(cublasCreate(&h));
    KVSCOPE_CUBLAS_CHECK(cublasSetStream(h, s));
    LlamaShape shape;
    json gemm = json::array();
    for (int32_t b : {1, 16, 64}) gemm.push_back(bench_gemm(shape, b, peak, s, h, quick));
    report["gemm_bound_decode_1b"] = gemm;
    report["gemm_bound_decode_1b_shape"] = {
        {"n_embd", shape.E},      {"n_ff", shape.F},     {"n_layer", shape.L}, {"n_head", shape.H},
        {"n_head_kv", shape.KVH}, {"head_dim", shape.D}, {"n_vocab", shape.V}, {"params", shape.weight_elems()}};
    cublasDestroy(h);
    cudaStreamDestroy(s);

    if (e2e) {
      const double t0 = now_s();
      if (!std::filesystem::exists(model_path)) {
        SyntheticSpec spec;
        spec.arch = "llama";
        spec.n_vocab = static_cast<int32_t>(shape.V);
        spec.n_embd = static_cast<int32_t>(shape.E);
        spec.n_layer = static_cast<int32_t>(shape.L);
        spec.n_head = static_cast<int32_t>(shape.H);
        spec.n_head_kv = static_cast<int32_t>(shape.KVH);
        spec.n_ff = static_cast<int32_t>(shape.F);
        spec.dtype = GgmlType::F16;
        std::printf("writing synthetic 1B llama to %s ...\n", model_path.c_str());
        std::fflush(stdout);
        write_synthetic_model(spec, model_path);
      }
      auto model = Model::load(model_path);
      CudaBackend be(model, 0, 0.9);
      KvLayout L{model->config.n_layer, model->config.n_head_kv, model->config.head_dim, 16, 0, KvDtype::F16};
      const int32_t recommended = be.recommended_num_blocks(L);
      L.num_blocks = 64 * 12;
      be.init_kv(L, {});
      std::printf("model ready in %.1f s: %s; recommended KV blocks at fraction 0.9: %d\n", now_s() - t0,
                  model->describe().c_str(), recommended);
      json e = json::array();
      for (int32_t b : {1, 16, 64}) {
        json r = bench_e2e(model, be, b, quick);
        for (const json& g : report["gemm_bound_decode_1b"])
          if (g["batch"] == b)
            r["gemm_bound_over_e2e"] = g["gemm_bound_tokens_per_s"].get<double>() / r["tokens_per_s"].get<double>();
        e.push_back(r);
      }
      report["decode_e2e_1b"] = {{"model", model->describe()},
                                 {"backend", be.name()},
                                 {"recommended_kv_blocks_f16_bs16_fraction_0.9", recommended},
                                 {"runs", e}};
      report["targets"]["e2e_within_gemm_bound_factor_max"] = 1.5;
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "kvscope-cuda-bench: %s\n", ex.what());
    report["error"] = ex.what();
    std::ofstream(out_path) << report.dump(2) << "\n";
    return 1;
  }
  std::ofstream(out_path) << report.dump(2) << "\n";
  std::printf("report: %s\n", out_path.c_str());
  return 0;
}
