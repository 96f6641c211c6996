// The recurrent layers' per-sequence state (lfm2's short convolutions, qwen35's Gated DeltaNet,
// granitehybrid's Mamba-2): one slot per running sequence, each [recurrent layer]
// [state_floats_per_layer] values in the state dtype (f32, f16 or bf16). The engine's
// StateSlotManager hands the slots out (sequences' first, then prefix-cache checkpoints); forks
// and checkpoint restores copy them.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cpu/cpu_backend.h"

namespace kvscope {

namespace {

GgmlType ggml_type_of(StateDtype t) { return t == StateDtype::F16 ? GgmlType::F16 : GgmlType::BF16; }

}  // namespace

void CpuBackend::init_state_slots(int32_t n_slots, StateDtype dtype) {
  const ModelConfig& c = model_->config;
  if (n_slots < 0) throw std::invalid_argument("state slots must not be negative");
  recurrent_index_.assign(static_cast<size_t>(c.n_layer), -1);
  int32_t n_rec = 0;
  for (int32_t il = 0; il < c.n_layer; ++il)
    if (c.layer_is_recurrent(il)) recurrent_index_[static_cast<size_t>(il)] = n_rec++;
  if (n_slots > 0 && n_rec == 0) throw std::invalid_argument("state slots for a model without recurrent layers");
  n_state_slots_ = n_slots;
  state_dtype_ = dtype;
  const size_t n = static_cast<size_t>(n_slots) * static_cast<size_t>(c.state_floats_per_seq());
  state_.assign(dtype == StateDtype::F32 ? n : 0, 0.0f);
  state16_.assign(dtype == StateDtype::F32 ? 0 : n, 0);  // 0x0000 is +0 in f16 and bf16 alike
}

int64_t CpuBackend::state_bytes_per_slot() const {
  return model_->config.state_floats_per_seq() * state_elem_bytes(state_dtype_);
}

void CpuBackend::copy_state_slots(std::span<const StateCopy> copies) {
  const size_t per_slot = static_cast<size_t>(model_->config.state_floats_per_seq());
  for (const StateCopy& cp : copies) {
    if (cp.src < 0 || cp.dst < 0 || cp.src >= n_state_slots_ || cp.dst >= n_state_slots_)
      throw std::invalid_argument("state copy between unknown slots");
    const size_t src = static_cast<size_t>(cp.src) * per_slot, dst = static_cast<size_t>(cp.dst) * per_slot;
    if (state_dtype_ == StateDtype::F32)
      std::memcpy(&state_[dst], &state_[src], per_slot * sizeof(float));
    else
      std::memcpy(&state16_[dst], &state16_[src], per_slot * sizeof(uint16_t));
  }
}

float* CpuBackend::token_state(int32_t il, const BatchView& batch, int32_t t) {
  const ModelConfig& c = model_->config;
  if (batch.state_slots.size() != batch.block_tables.size())
    throw std::invalid_argument("a model with recurrent layers needs a state slot per sequence");
  const int32_t slot = batch.state_slots[static_cast<size_t>(batch.seq_index[static_cast<size_t>(t)])];
  if (slot < 0 || slot >= n_state_slots_) throw std::invalid_argument("a sequence without a state slot");
  const size_t per_layer = static_cast<size_t>(c.state_floats_per_layer());
  state_layer_at_ = static_cast<size_t>(recurrent_index_[static_cast<size_t>(il)]) * per_layer;
  state_work_at_ = static_cast<size_t>(slot) * static_cast<size_t>(c.state_floats_per_seq()) + state_layer_at_;
  const bool fresh = batch.positions[static_cast<size_t>(t)] == 0;
  if (state_dtype_ == StateDtype::F32) {
    float* st = &state_[state_work_at_];
    if (fresh) std::fill(st, st + per_layer, 0.0f);
    return st;
  }
  state_work_.resize(per_layer);
  if (fresh)
    std::fill(state_work_.begin(), state_work_.end(), 0.0f);
  else
    dequantize_row(ggml_type_of(state_dtype_), &state16_[state_work_at_], state_work_.data(),
                   static_cast<int64_t>(per_layer));
  return state_work_.data();
}

void CpuBackend::store_token_state(const BatchView& batch, int32_t t) {
  const ModelConfig& c = model_->config;
  const size_t per_layer = static_cast<size_t>(c.state_floats_per_layer());
  if (state_dtype_ != StateDtype::F32)
    quantize_row(ggml_type_of(state_dtype_), state_work_.data(), &state16_[state_work_at_],
                 static_cast<int64_t>(per_layer));
  const int32_t save = batch.state_save_to.empty() ? -1 : batch.state_save_to[static_cast<size_t>(t)];
  if (save < 0) return;
  if (save >= n_state_slots_) throw std::invalid_argument("a state checkpoint into an unknown slot");
  // The layer's state as stored, so a restored sequence continues from the very same bits.
  const size_t dst = static_cast<size_t>(save) * static_cast<size_t>(c.state_floats_per_seq()) + state_layer_at_;
  if (state_dtype_ == StateDtype::F32)
    std::memcpy(&state_[dst], &state_[state_work_at_], per_layer * sizeof(float));
  else
    std::memcpy(&state16_[dst], &state16_[state_work_at_], per_layer * sizeof(uint16_t));
}

}  // namespace kvscope
