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
// - prefix-cache hits only where a state checkpoint exists (kv/state_checkpoint_pool.h): a hit
//   is the KV allocator's, cut to the longest checkpointed prefix within it, and queues a copy
//   of that checkpoint into the sequence's slot; the rest of the prompt is recomputed. The
//   policy says at which block boundaries a computing sequence leaves checkpoints
//   (state_save_slot: the backend copies the state there after that position), and every
//   policy also checkpoints a prompt's branch point: where its KV hit ended beyond its state
//   hit (a shared system prompt's end), which its next sibling will hit. Without checkpoints
//   (policy off or no room) a hit attaches nothing.
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/kv_slot_allocator.h"
#include "kv/state_checkpoint_pool.h"

namespace kvscope {

struct StateCopy {
  int32_t src = 0, dst = 0;  // state slots
};

struct StateSlotConfig {
  int32_t n_slots = 1;        // sequences that can hold a state at once (slots 0 .. n_slots - 1)
  int32_t n_checkpoints = 0;  // checkpoint slots after them (0: no prefix-cache hits)
  int32_t block_size = 16;    // the KV allocator's: checkpoints sit at its block boundaries
  CheckpointPolicy policy;
  uint64_t hash_salt = 0;  // the KV blocks' salt: a checkpoint's key is its last block's hash
};

class StateSlotManager : public KvSlotAllocator {
 public:
  StateSlotManager(std::unique_ptr<KvSlotAllocator> inner, const StateSlotConfig& cfg);
  // n_slots >= 1 sequence slots, no checkpoints.
  StateSlotManager(std::unique_ptr<KvSlotAllocator> inner, int32_t n_slots);

  const KvSlotAllocator& inner() const { return *inner_; }
  int32_t num_state_slots() const { return static_cast<int32_t>(free_.size() + slot_of_.size()); }
  int32_t used_state_slots() const { return static_cast<int32_t>(slot_of_.size()); }
  const StateCheckpointPool& checkpoints() const { return checkpoints_; }
  const CheckpointPolicy& checkpoint_policy() const { return policy_; }
  // seq's slot, or -1 when it holds none.
  int32_t state_slot(SeqId seq) const override;
  int32_t state_save_slot(SeqId seq, int32_t pos) const override;
  // Slot copies the next step must make before it computes: forks and checkpoint restores.
  std::vector<StateCopy> take_state_copies();
  // The step ran: the checkpoints it wrote become hits, and its save requests are done.
  void commit_checkpoints();

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
  int32_t peek_cached_prefix(std::span<const TokenId> prompt) const override {
    return inner_->peek_cached_prefix(hit_cut(prompt));
  }
  // The KV groups' own hits, before the cut to a state checkpoint: a story that sees them exceed
  // the hit knows the state ended it (MissReason::NoStateCheckpoint).
  std::vector<int32_t> peek_cached_prefix_by_group(std::span<const TokenId> prompt) const override {
    return inner_->peek_cached_prefix_by_group(prompt);
  }
  bool can_admit(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len) const override {
    return !free_.empty() && inner_->can_admit(hit_cut(prompt), n_tokens, max_len);
  }
  std::string never_fits(int32_t n_tokens, int32_t max_chunk) const override {
    return inner_->never_fits(n_tokens, max_chunk);
  }
  void set_max_len(SeqId seq, int32_t max_len) override { inner_->set_max_len(seq, max_len); }
  void admission_blocked(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len) override {
    inner_->admission_blocked(hit_cut(prompt), n_tokens, max_len);
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
  KvAllocatorCounters allocator_counters() const override;
  TokenEvictionCounters token_eviction_counters() const override { return inner_->token_eviction_counters(); }
  AllocatorSnap allocator_snap() const override { return inner_->allocator_snap(); }
  // The inner allocator's invariants, and: every slot is free or held by one live sequence.
  void validate() const override;

 private:
  // prompt cut so that the KV allocator's hit on it ends at the longest checkpointed prefix
  // within its own hit (the last prompt token stays: it is never a hit), with both hits.
  struct Cut {
    int32_t kv_hit = 0;
    StateCheckpointPool::Hit hit;
    std::span<const TokenId> prompt;
  };
  Cut cut_at_checkpoint(std::span<const TokenId> prompt) const;
  std::span<const TokenId> hit_cut(std::span<const TokenId> prompt) const { return cut_at_checkpoint(prompt).prompt; }
  // The checkpoints seq leaves while computing tokens [from, to) of tokens.
  void plan_saves(SeqId seq, std::span<const TokenId> tokens, int32_t from, int32_t to);

  std::unique_ptr<KvSlotAllocator> inner_;
  CheckpointPolicy policy_;
  StateCheckpointPool checkpoints_;
  std::vector<int32_t> free_;  // free slots, the next one taken last
  std::unordered_map<SeqId, int32_t> slot_of_;
  std::vector<StateCopy> copies_;
  std::unordered_map<SeqId, int32_t> restore_from_;  // attached on a checkpoint, slot not yet taken
  std::unordered_map<SeqId, int32_t> prompt_len_;    // at attach: where "prompt-end" checkpoints
  // At attach, where its KV hit ended when the state hit ended sooner: the prefix it shares with
  // cached sequences, checkpointed whatever the policy (the next sibling hits it).
  std::unordered_map<SeqId, int32_t> branch_at_;
  std::unordered_map<SeqId, std::vector<std::pair<int32_t, int32_t>>> saves_;  // this step: (position, slot)
  uint64_t uncounted_query_tokens_ = 0;  // prompt tokens past a cut, which the KV allocator never saw
};

}  // namespace kvscope
