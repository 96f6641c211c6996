#include "kv/state_slot_manager.h"

#include <stdexcept>
#include <string>

namespace kvscope {

StateSlotManager::StateSlotManager(std::unique_ptr<KvSlotAllocator> inner, int32_t n_slots) : inner_(std::move(inner)) {
  if (!inner_ || n_slots < 1) throw std::invalid_argument("state slots: need an allocator and at least one slot");
  for (int32_t s = n_slots - 1; s >= 0; --s) free_.push_back(s);  // slot 0 is taken first
}

int32_t StateSlotManager::state_slot(SeqId seq) const {
  const auto it = slot_of_.find(seq);
  return it == slot_of_.end() ? -1 : it->second;
}

std::vector<StateCopy> StateSlotManager::take_state_copies() {
  std::vector<StateCopy> out;
  out.swap(copies_);
  return out;
}

int32_t StateSlotManager::attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) {
  (void)prompt;
  return inner_->attach_cached_prefix(seq, {});  // registers the sequence, attaches nothing
}

bool StateSlotManager::allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) {
  const bool needs_slot = !slot_of_.contains(seq);
  if (needs_slot && free_.empty()) return false;
  if (!inner_->allocate_slots(seq, tokens, n_new)) return false;
  if (needs_slot) {
    slot_of_[seq] = free_.back();
    free_.pop_back();
  }
  return true;
}

void StateSlotManager::fork(SeqId parent, SeqId child) {
  const int32_t from = state_slot(parent);
  if (from < 0) throw std::logic_error("state slots: fork of a sequence that holds no state");
  if (free_.empty())
    throw std::length_error("the recurrent-state pool has no slot left for a forked sequence (" +
                            std::to_string(num_state_slots()) + " slots)");
  inner_->fork(parent, child);
  slot_of_[child] = free_.back();
  free_.pop_back();
  copies_.push_back({from, slot_of_[child]});
}

void StateSlotManager::free(SeqId seq) {
  inner_->free(seq);
  const auto it = slot_of_.find(seq);
  if (it == slot_of_.end()) return;
  free_.push_back(it->second);
  slot_of_.erase(it);
}

void StateSlotManager::validate() const {
  inner_->validate();
  std::vector<int> seen(static_cast<size_t>(num_state_slots()), 0);
  for (int32_t s : free_) ++seen[static_cast<size_t>(s)];
  for (const auto& [seq, s] : slot_of_) {
    ++seen[static_cast<size_t>(s)];
    if (!inner_->has_seq(seq)) throw std::logic_error("state slots: slot held by a sequence the KV allocator lost");
  }
  for (int n : seen)
    if (n != 1) throw std::logic_error("state slots: a slot is both free and held, or held twice");
}

}  // namespace kvscope
