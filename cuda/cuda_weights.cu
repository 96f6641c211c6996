// CudaBackend's weight upload (cuda_backend_impl.cuh): every matrix is dequantized on the
// host (dequantize_row, whatever its GGUF type) and uploaded once as f16 -- bf16 when the
// model's matrices are bf16 -- with q/k/v packed into one matrix and gate/up into another.
#include <algorithm>
#include <thread>
#include <vector>

#include "cuda_backend_impl.cuh"
#include "gguf/ggml_types.h"

namespace kvscope {

namespace {

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

void CudaBackend::Impl::upload_f32(DevBuf& dst, const std::vector<float>& v, const char* what) {
  if (v.empty()) return;
  dst.ensure(v.size() * sizeof(float), what);
  KVSCOPE_CUDA_CHECK(cudaMemcpy(dst.p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  weight_bytes += static_cast<int64_t>(v.size() * sizeof(float));
}

// Rows of the given matrices stacked into one [sum rows][cols] device matrix of ActType.
void CudaBackend::Impl::upload_matrix(DevBuf& dst, std::initializer_list<const TensorView*> parts, const char* what) {
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

void CudaBackend::Impl::upload_weights() {
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
    if (!L.aq.bias.empty()) {
      std::vector<float> b(L.aq.bias);
      b.insert(b.end(), L.ak.bias.begin(), L.ak.bias.end());
      b.insert(b.end(), L.av.bias.begin(), L.av.bias.end());
      upload_f32(d.bqkv, b, "attn_qkv_bias");
    }
  }
}

}  // namespace kvscope
