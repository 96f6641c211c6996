// CudaBackend::forward: one step on the device. Reads top to bottom like CpuBackend::forward:
// check the batch, plan the attention work, upload the step, embed, then per layer norm + QKV,
// RoPE + cache write, attention, output projection, FFN; final norm + logits. The math of each
// step lives in cuda_kernels.cu / cuda_attention.cu / cuda_packed.cu and in cuBLAS.
#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_backend_impl.cuh"

namespace kvscope {

struct CudaBackend::Impl::Step {
  Impl& I;
  const BatchView& batch;
  const ModelConfig& c;
  int32_t n = 0, n_seqs = 0, n_out = 0;
  // Work lists: a run of consecutive positions of one sequence (a prompt chunk) goes to the
  // prefill kernel in tiles (start, length pairs); a lone token (decode) to the split-K kernel.
  std::vector<int32_t> decode_tokens, tiles;
  std::vector<int32_t> res_slot, complete;  // KIVI: Impl::plan_residual
  cuda::StepPtrs sp;
  cuda::KvGeometry geom;
  std::map<std::pair<int32_t, int32_t>, int32_t> parts_for_window;  // (window, sinks) -> partitions
  int32_t part_stride = 0;
  int64_t ws_floats = 0;

  Step(Impl& impl, const BatchView& b) : I(impl), batch(b), c(impl.model->config), n(b.n_tokens()) {}

  void check_batch();
  void plan_work();
  void upload();
  int32_t max_parts(int32_t window, int32_t sinks);
  void ensure_activations();
  void embed();
  void qkv_rope_store(int32_t il, cuda::QkvParams& qp);
  void attention(int32_t il, const cuda::QkvParams& qp);
  void output_and_ffn(int32_t il);
  void logits(float* logits_out);
  void check_errors();
};

void CudaBackend::Impl::Step::check_batch() {
  if (!I.kv_pool.p) throw std::logic_error("forward before init_kv");
  const KvLayout& L = I.layout;
  const size_t un = static_cast<size_t>(n);
  if (batch.positions.size() != un || batch.slot_mapping.size() != un || batch.seq_index.size() != un)
    throw std::invalid_argument("BatchView: tokens, positions, slot_mapping and seq_index differ in length");
  if (batch.n_groups() != 1)
    throw std::invalid_argument(
        "the CUDA backend stores one KV group: run without the hybrid KV cache (--hybrid-kv off)");
  n_seqs = static_cast<int32_t>(batch.block_tables.size());
  n_out = static_cast<int32_t>(batch.logits_rows.size());
  const int64_t n_slots_total = static_cast<int64_t>(L.num_blocks) * L.block_size;
  for (int32_t t = 0; t < n; ++t) {
    const TokenId id = batch.tokens[static_cast<size_t>(t)];
    if (id < 0 || id >= c.n_vocab)
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary");
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
}

void CudaBackend::Impl::Step::plan_work() {
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
  KVSCOPE_CUDA_CHECK(cudaSetDevice(I.device));
  if (I.kivi()) I.plan_residual(batch, &res_slot, &complete);
}

// Packs the step into one pinned buffer (int64 slots first, for alignment, then int32 arrays),
// uploads it, and points sp and geom into the device copy.
void CudaBackend::Impl::Step::upload() {
  const size_t un = static_cast<size_t>(n);
  const size_t n_res = res_slot.size(), n_map = I.kivi() ? I.res_of_block.size() : 0;
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
  for (int32_t s = 0, acc = 0; s <= n_seqs; ++s) {
    h32[at++] = acc;
    if (s < n_seqs) acc += static_cast<int32_t>(batch.block_tables[static_cast<size_t>(s)].size());
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
  sp.n_decode = static_cast<int32_t>(decode_tokens.size());
  sp.n_tiles = static_cast<int32_t>(tiles.size() / 2);
  if (I.kivi()) {
    sp.res_slot = d32 + o_res;
    sp.kivi_complete = d32 + o_complete;
    sp.n_complete = static_cast<int32_t>(complete.size() / 2);
  }
  geom = I.pool_view.kv;
  if (I.kivi()) geom.res_of_block = d32 + o_map;
}

// Split-K partitions per window value (a model's SWA layers need fewer).
int32_t CudaBackend::Impl::Step::max_parts(int32_t window, int32_t sinks) {
  auto it = parts_for_window.find({window, sinks});
  if (it != parts_for_window.end()) return it->second;
  int32_t m = 0;
  for (int32_t t : decode_tokens) {
    const auto vr = kvmath::visible_range(batch.positions[static_cast<size_t>(t)], window, sinks);
    m = std::max(m, kvmath::num_partitions(vr.count(), cuda::kDecodePartition));
  }
  parts_for_window[{window, sinks}] = m;
  return m;
}

void CudaBackend::Impl::Step::ensure_activations() {
  for (int32_t il = 0; il < c.n_layer; ++il)
    part_stride = std::max(part_stride, max_parts(I.layer_window(il), I.layer_sinks(il)));
  const size_t un = static_cast<size_t>(n);
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
  ws_floats = cuda::attention_workspace_floats(sp.n_decode, c.n_head, part_stride, c.head_dim);
  if (ws_floats > 0) I.attn_ws.ensure(static_cast<size_t>(ws_floats) * 4, "attention split-K workspace");
}

// Token embeddings into x, and layer 0's attention norm into xn.
void CudaBackend::Impl::Step::embed() {
  cuda::launch_embed(I.act, I.tok_embd.p, sp.tokens, n, c.n_embd, c.traits.embed_scale, I.x.as<float>(), I.stream);
  cuda::launch_residual_norm(I.act, I.x.as<float>(), nullptr, nullptr, I.layers[0].attn_norm.as<float>(), I.xn.p,
                             nullptr, n, c.n_embd, c.rms_eps, I.stream);
}

// QKV of the normed x, then per token q/k norms, bias and RoPE, and K/V into the cache.
void CudaBackend::Impl::Step::qkv_rope_store(int32_t il, cuda::QkvParams& qp) {
  const Layer& W = I.layers[static_cast<size_t>(il)];
  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim();
  I.gemm(W.wqkv.p, Q + 2 * KV, E, I.xn.p, n, I.qkv.as<float>());
  qp.qkv = I.qkv.as<float>();
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
  qp.error = I.error_dev.as<int32_t>();
  // Every token's K/V is stored before this layer's attention runs (stream order), so the
  // tokens of a prompt chunk see each other.
  cuda::launch_qkv_rope_store(qp, I.stream);
}

// Paged attention of layer il into att; then KIVI's blocks this step filled are quantized,
// once the attention has read them in f16.
void CudaBackend::Impl::Step::attention(int32_t il, const cuda::QkvParams& qp) {
  const int64_t Q = c.q_dim(), KV = c.kv_dim();
  cuda::AttnParams ap;
  ap.q = I.qkv.as<float>();
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
    ap.part_o = ap.part_ml + static_cast<int64_t>(sp.n_decode) * c.n_head * part_stride * 2;
  }
  ap.error = I.error_dev.as<int32_t>();
  if (I.packed != PackedKv::None)
    cuda::launch_attention_packed(I.act, ap, I.stream);
  else
    cuda::launch_attention(I.act, ap, I.stream);
  cuda::launch_kivi_complete(qp.kv, qp.k, qp.v, sp, I.stream);
}

// Output projection and residual, FFN and residual; xn ends normed for the next layer.
void CudaBackend::Impl::Step::output_and_ffn(int32_t il) {
  const Layer& W = I.layers[static_cast<size_t>(il)];
  const int64_t E = c.n_embd, Q = c.q_dim(), F = c.n_ff;
  float* x = I.x.as<float>();
  float* o = I.o.as<float>();
  float* gu = I.gu.as<float>();
  const bool gelu = c.traits.act == FfnActivation::GeluTanh;
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

// Only the rows whose logits are wanted go through the output matrix and back to the host.
void CudaBackend::Impl::Step::logits(float* logits_out) {
  if (n_out <= 0) return;
  const int64_t E = c.n_embd, V = c.n_vocab;
  cuda::launch_residual_norm(I.act, I.x.as<float>(), nullptr, nullptr, I.output_norm.as<float>(), I.xn.p,
                             sp.logits_rows, n_out, c.n_embd, c.rms_eps, I.stream);
  I.gemm(I.output_ptr, V, E, I.xn.p, n_out, I.logits.as<float>());
  KVSCOPE_CUDA_CHECK(
      cudaMemcpyAsync(logits_out, I.logits.p, static_cast<size_t>(n_out) * V * 4, cudaMemcpyDeviceToHost, I.stream));
}

// The kernels' error flag, read once the step is done.
void CudaBackend::Impl::Step::check_errors() {
  int32_t* err = I.error_dev.as<int32_t>();
  KVSCOPE_CUDA_CHECK(cudaMemcpyAsync(I.error_host.p, err, sizeof(int32_t), cudaMemcpyDeviceToHost, I.stream));
  KVSCOPE_CUDA_CHECK(cudaStreamSynchronize(I.stream));
  const int32_t code = *static_cast<int32_t*>(I.error_host.p);
  if (code == cuda::kErrNone) return;
  KVSCOPE_CUDA_CHECK(cudaMemset(err, 0, sizeof(int32_t)));
  const char* what = code == cuda::kErrDroppedBlock   ? "attention reached a dropped block (kNoBlock)"
                     : code == cuda::kErrTableOverrun ? "a visible position lies past the block table"
                                                      : "a slot or block id lies outside the KV pool";
  throw std::logic_error(std::string("CUDA backend: ") + what);
}

void CudaBackend::forward(const BatchView& batch, float* logits_out) {
  Impl::Step step(*impl_, batch);
  if (step.n == 0) return;
  step.check_batch();
  step.plan_work();
  step.upload();
  step.ensure_activations();
  step.embed();
  for (int32_t il = 0; il < step.c.n_layer; ++il) {
    cuda::QkvParams qp;
    step.qkv_rope_store(il, qp);
    step.attention(il, qp);
    step.output_and_ffn(il);
  }
  KVSCOPE_CUDA_CHECK(cudaGetLastError());
  step.logits(logits_out);
  step.check_errors();
}

}  // namespace kvscope
