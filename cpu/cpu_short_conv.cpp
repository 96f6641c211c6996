// lfm2's short-convolution layers and the per-sequence state they keep, as llama.cpp's lfm2
// graph computes them (src/models/lfm2.cpp build_shortconv_block, ggml_ssm_conv): per channel
// e, out_t[e] = sum_k w[e][k] * window_t[k] over the window [the L-1 values before t, B_t x_t],
// summed in f32 oldest first; the state is the last L-1 values of B*x. A sequence at position
// 0 starts from zeros (a new one, or one recomputed after a preemption); chunks continue it,
// so any split of a prompt into chunks gives the same numbers.
#include <cstring>
#include <stdexcept>

#include "cpu/cpu_backend.h"
#include "cpu/ops.h"

namespace kvscope {

void CpuBackend::init_state_slots(int32_t n_slots) {
  const ModelConfig& c = model_->config;
  if (n_slots < 0) throw std::invalid_argument("state slots must not be negative");
  recurrent_index_.assign(static_cast<size_t>(c.n_layer), -1);
  int32_t n_rec = 0;
  for (int32_t il = 0; il < c.n_layer; ++il)
    if (c.layer_is_recurrent(il)) recurrent_index_[static_cast<size_t>(il)] = n_rec++;
  if (n_slots > 0 && n_rec == 0) throw std::invalid_argument("state slots for a model without recurrent layers");
  n_state_slots_ = n_slots;
  conv_state_.assign(static_cast<size_t>(n_slots) * static_cast<size_t>(c.state_floats_per_seq()), 0.0f);
}

int64_t CpuBackend::state_bytes_per_slot() const {
  return model_->config.state_floats_per_seq() * static_cast<int64_t>(sizeof(float));
}

void CpuBackend::copy_state_slots(std::span<const StateCopy> copies) {
  const size_t per_slot = static_cast<size_t>(model_->config.state_floats_per_seq());
  for (const StateCopy& cp : copies) {
    if (cp.src < 0 || cp.dst < 0 || cp.src >= n_state_slots_ || cp.dst >= n_state_slots_)
      throw std::invalid_argument("state copy between unknown slots");
    std::memcpy(&conv_state_[static_cast<size_t>(cp.dst) * per_slot],
                &conv_state_[static_cast<size_t>(cp.src) * per_slot], per_slot * sizeof(float));
  }
}

void CpuBackend::short_conv_block(int32_t il, const BatchView& batch) {
  const ModelConfig& c = model_->config;
  const LayerWeights& L = model_->weights.layers[static_cast<size_t>(il)];
  const int32_t n = batch.n_tokens(), K = c.conv_l_cache, S = K - 1;
  const int64_t E = c.n_embd;
  if (batch.state_slots.size() != batch.block_tables.size())
    throw std::invalid_argument("a model with recurrent layers needs a state slot per sequence");
  conv_bcx_.resize(static_cast<size_t>(n * 3 * E));
  conv_y_.resize(static_cast<size_t>(n * E));
  for (int32_t t = 0; t < n; ++t)
    rms_norm(&x_[t * E], L.attn_norm.data(), &xn_[t * E], static_cast<int32_t>(E), c.rms_eps);
  matmul_timed(L.conv_in, xn_.data(), n, conv_bcx_.data());
  const size_t per_slot = static_cast<size_t>(c.state_floats_per_seq()), per_layer = static_cast<size_t>(E * S);
  const size_t layer_off = static_cast<size_t>(recurrent_index_[static_cast<size_t>(il)]) * per_layer;
  for (int32_t t = 0; t < n; ++t) {
    const int32_t slot = batch.state_slots[static_cast<size_t>(batch.seq_index[static_cast<size_t>(t)])];
    if (slot < 0 || slot >= n_state_slots_) throw std::invalid_argument("a sequence without a state slot");
    float* st = &conv_state_[static_cast<size_t>(slot) * per_slot + layer_off];
    if (batch.positions[static_cast<size_t>(t)] == 0) std::fill(st, st + per_layer, 0.0f);
    const float* b = &conv_bcx_[static_cast<size_t>(t * 3 * E)];
    const float *cc = b + E, *x = b + 2 * E;
    float* y = &conv_y_[static_cast<size_t>(t * E)];
    for (int64_t e = 0; e < E; ++e) {
      float* s = st + e * S;
      const float* w = &L.conv_kernel[static_cast<size_t>(e * K)];
      const float bx = b[e] * x[e];
      float sum = 0.0f;
      for (int32_t k = 0; k < S; ++k) sum += s[k] * w[k];
      sum += bx * w[S];
      for (int32_t k = 0; k + 1 < S; ++k) s[k] = s[k + 1];
      s[S - 1] = bx;
      y[e] = cc[e] * sum;
    }
  }
  matmul_timed(L.conv_out, conv_y_.data(), n, o_.data());
  add_mixer_output(il, n);
}

}  // namespace kvscope
