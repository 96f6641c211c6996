// The recurrent layers' per-sequence state (lfm2's short convolutions, qwen35's Gated DeltaNet):
// one slot per running sequence, each [recurrent layer][state_floats_per_layer] f32 values. The
// engine's StateSlotManager hands the slots out; forks copy them.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cpu/cpu_backend.h"

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
  state_.assign(static_cast<size_t>(n_slots) * static_cast<size_t>(c.state_floats_per_seq()), 0.0f);
}

int64_t CpuBackend::state_bytes_per_slot() const {
  return model_->config.state_floats_per_seq() * static_cast<int64_t>(sizeof(float));
}

void CpuBackend::copy_state_slots(std::span<const StateCopy> copies) {
  const size_t per_slot = static_cast<size_t>(model_->config.state_floats_per_seq());
  for (const StateCopy& cp : copies) {
    if (cp.src < 0 || cp.dst < 0 || cp.src >= n_state_slots_ || cp.dst >= n_state_slots_)
      throw std::invalid_argument("state copy between unknown slots");
    std::memcpy(&state_[static_cast<size_t>(cp.dst) * per_slot], &state_[static_cast<size_t>(cp.src) * per_slot],
                per_slot * sizeof(float));
  }
}

float* CpuBackend::token_state(int32_t il, const BatchView& batch, int32_t t) {
  const ModelConfig& c = model_->config;
  if (batch.state_slots.size() != batch.block_tables.size())
    throw std::invalid_argument("a model with recurrent layers needs a state slot per sequence");
  const int32_t slot = batch.state_slots[static_cast<size_t>(batch.seq_index[static_cast<size_t>(t)])];
  if (slot < 0 || slot >= n_state_slots_) throw std::invalid_argument("a sequence without a state slot");
  const size_t per_layer = static_cast<size_t>(c.state_floats_per_layer());
  float* st = &state_[static_cast<size_t>(slot) * static_cast<size_t>(c.state_floats_per_seq()) +
                      static_cast<size_t>(recurrent_index_[static_cast<size_t>(il)]) * per_layer];
  if (batch.positions[static_cast<size_t>(t)] == 0) std::fill(st, st + per_layer, 0.0f);
  return st;
}

}  // namespace kvscope
