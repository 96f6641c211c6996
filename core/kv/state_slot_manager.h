#pragma once
// The recurrent-state pool of a hybrid model (LFM2's short convolutions; later Gated DeltaNet
// and Mamba-2 layers): every running sequence holds one state slot (the conv / recurrent state
// of each recurrent layer, a fixed number of bytes whatever its length) beside its KV blocks,
// which only the attention layers use. This wraps the KV allocator (paged, hybrid or baseline)
// and adds the slots to its contract:
// - a sequence takes a slot with its first allocate_slots() and gives it back with free(), so
//   preemption frees both its blocks and its state, and a resumed sequence starts a new state
//   (the backend zeroes a slot whose sequence is at position 0: it recomputes from the start);
// - can_admit() also needs a free slot, so admission accounts for both pools;
// - fork() gives the child a slot and queues a copy of the parent's state (take_state_copies);
// - no prefix-cache hit: a hit would skip tokens whose state the slot never saw (state
//   checkpoints at block boundaries are the next stage), so attach_cached_prefix attaches none.
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/kv_slot_allocator.h"

namespace kvscope {

struct StateCopy {
  int32_t src = 0, dst = 0;  // state slots
};

class StateSlotManager : public KvSlotAllocator {
 public:
  // n_slots >= 1: how many sequences can hold a state at once.
  StateSlotManager(std::unique_ptr<KvSlotAllocator> inner, int32_t n_slots);

  const KvSlotAllocator& inner() const { return *inner_; }
  int32_t num_state_slots() const { return static_cast<int32_t>(free_.size() + slot_of_.size()); }
  int32_t used_state_slots() const { return static_cast<int32_t>(slot_of_.size()); }
  // seq's slot, or -1 when it holds none.
  int32_t state_slot(SeqId seq) const override;
  std::vector<StateCopy> take_state_copies();

  int32_t attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) override;
  int32_t blocks_needed(SeqId seq, int32_t n_new) const override { return inner_->blocks_needed(seq, n_new); }
  bool allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) override;
  int64_t slot(SeqId seq, int32_t pos) const override { return inner_->slot(seq, pos); }
  int32_t seq_len(SeqId seq) const override { return inner_->seq_len(seq); }
  bool has_seq(SeqId seq) const override { return inner_->has_seq(seq); }
  void fork(SeqId parent, SeqId child) override;
  void free(SeqId seq) override;
  std::vector<BlockCopy> take_pending_copies() override { return inner_->take_pending_copies(); }
  std::vector<BlockRelease> take_released_blocks() override { return inner_->take_released_blocks(); }
  void take_evictions(std::vector<EvictionRecord>& out) override { inner_->take_evictions(out); }
  int32_t peek_cached_prefix(std::span<const TokenId>) const override { return 0; }
  std::vector<int32_t> peek_cached_prefix_by_group(std::span<const TokenId>) const override {
    return std::vector<int32_t>(static_cast<size_t>(inner_->num_groups()), 0);
  }
  bool can_admit(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len) const override {
    return !free_.empty() && inner_->can_admit(prompt, n_tokens, max_len);
  }
  std::string never_fits(int32_t n_tokens, int32_t max_chunk) const override {
    return inner_->never_fits(n_tokens, max_chunk);
  }
  void set_max_len(SeqId seq, int32_t max_len) override { inner_->set_max_len(seq, max_len); }
  void admission_blocked(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len) override {
    inner_->admission_blocked(prompt, n_tokens, max_len);
  }
  int32_t num_groups() const override { return inner_->num_groups(); }
  int32_t num_blocks(int32_t group) const override { return inner_->num_blocks(group); }
  std::vector<BlockId> group_block_table(SeqId seq, int32_t group) const override {
    return inner_->group_block_table(seq, group);
  }
  int64_t group_slot(int32_t group, SeqId seq, int32_t pos) const override {
    return inner_->group_slot(group, seq, pos);
  }
  void take_block_changes(int32_t group, std::vector<BlockChange>& out) override {
    inner_->take_block_changes(group, out);
  }
  KvAllocatorCounters allocator_counters() const override { return inner_->allocator_counters(); }
  TokenEvictionCounters token_eviction_counters() const override { return inner_->token_eviction_counters(); }
  AllocatorSnap allocator_snap() const override { return inner_->allocator_snap(); }
  // The inner allocator's invariants, and: every slot is free or held by one live sequence.
  void validate() const override;

 private:
  std::unique_ptr<KvSlotAllocator> inner_;
  std::vector<int32_t> free_;  // free slots, the next one taken last
  std::unordered_map<SeqId, int32_t> slot_of_;
  std::vector<StateCopy> copies_;
};

}  // namespace kvscope
