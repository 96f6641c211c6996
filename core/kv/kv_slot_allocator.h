#pragma once
// What the Scheduler (and the engine's slot mapping) needs from a KV allocator, so the same
// scheduler can drive the paged KvCacheManager or the contiguous pre-paging baseline
// (ContiguousKvManager) on the same workload and their memory numbers compare.
//
// Contract for every implementation:
// - a sequence appears with attach_cached_prefix() (or its first allocate_slots()) and
//   disappears with free(); seq_len() counts tokens that have a slot;
// - allocate_slots() either reserves everything asked or returns false and changes nothing;
// - the dry runs (peek_cached_prefix, can_admit, blocks_needed, never_fits) change nothing,
//   not even counters, so a request blocked at the head of the queue is not counted twice.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_types.h"
#include "kv/kv_view.h"

namespace kvscope {

class KvSlotAllocator {
 public:
  virtual ~KvSlotAllocator() = default;

  // New sequence: attach the cached prefix of prompt; returns the tokens already present.
  virtual int32_t attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) = 0;
  // Units (blocks; slots for the contiguous baseline) newly taken to hold n_new more tokens.
  virtual int32_t blocks_needed(SeqId seq, int32_t n_new) const = 0;
  // Slots for tokens [seq_len, seq_len + n_new); tokens holds all ids up to seq_len + n_new.
  virtual bool allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) = 0;
  virtual int64_t slot(SeqId seq, int32_t pos) const = 0;
  virtual int32_t seq_len(SeqId seq) const = 0;
  virtual bool has_seq(SeqId seq) const = 0;
  virtual void fork(SeqId parent, SeqId child) = 0;
  virtual void free(SeqId seq) = 0;  // no-op for an unknown sequence (cancel may race admission)
  virtual std::vector<BlockCopy> take_pending_copies() = 0;
  // Blocks freed outside the prefix cache since the last call (kv/kv_types.h BlockRelease);
  // empty unless the allocator was asked to report them (KIVI's residual).
  virtual std::vector<BlockRelease> take_released_blocks() { return {}; }
  // Prefix-cache hashes evicted since the last call, with the sequence whose allocation did it
  // (none for an allocator without a prefix cache).
  virtual void take_evictions(std::vector<EvictionRecord>& out) { (void)out; }

  // --- admission control (dry runs) ---
  // Tokens of prompt that attach_cached_prefix would find right now.
  virtual int32_t peek_cached_prefix(std::span<const TokenId> prompt) const = 0;
  // The same per KV group (the hybrid KV cache's hit is the shorter of its groups'): which
  // group's cache ended a hit, for the request's story.
  virtual std::vector<int32_t> peek_cached_prefix_by_group(std::span<const TokenId> prompt) const {
    return {peek_cached_prefix(prompt)};
  }
  // Could a new sequence attach its cached prefix and then hold its first n_tokens tokens
  // (n_tokens >= the cached prefix) with what is free now? max_len: the most tokens the request
  // can ever hold, min(prompt + max_new_tokens, max_model_len); only an allocator that reserves
  // up front (the contiguous baseline) looks at it.
  virtual bool can_admit(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len) const = 0;
  // Empty when a sequence of n_tokens, computed in chunks of at most max_chunk tokens, fits
  // an otherwise empty allocator; else why it never can (the scheduler's rejection message).
  virtual std::string never_fits(int32_t n_tokens, int32_t max_chunk) const = 0;

  // --- hooks for allocators that reserve up front (no-ops for the paged managers) ---
  // After attach_cached_prefix(), before the first allocate_slots(): can_admit()'s max_len.
  virtual void set_max_len(SeqId seq, int32_t max_len) {
    (void)seq;
    (void)max_len;
  }
  // can_admit() said no with these arguments: the head of the queue waits this step. Not a dry
  // run: called once per blocked step, so an allocator may count why admission failed.
  virtual void admission_blocked(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len) {
    (void)prompt;
    (void)n_tokens;
    (void)max_len;
  }

  // --- read-only view: what the engine's block-event recorder and snapshot builder read, the
  //     same way for every allocator (the engine never asks which one it has) ---
  virtual int32_t num_groups() const { return 1; }  // KV layer groups (2: the hybrid KV cache)
  virtual int32_t num_blocks(int32_t group) const = 0;
  // Logical -> physical blocks of seq in group (kNoBlock where dropped); empty when unknown.
  virtual std::vector<BlockId> group_block_table(SeqId seq, int32_t group) const = 0;
  virtual int64_t group_slot(int32_t group, SeqId seq, int32_t pos) const {
    (void)group;
    return slot(seq, pos);
  }
  // Appends the blocks of group that may have changed since the last call, in block order,
  // each with its state now (owner = lowest holding sequence). Consumes the change log (an
  // allocator without one reports every block).
  virtual void take_block_changes(int32_t group, std::vector<BlockChange>& out) = 0;
  virtual KvAllocatorCounters allocator_counters() const = 0;
  virtual TokenEvictionCounters token_eviction_counters() const { return {}; }  // token eviction (paged only)
  // The shape of the free space (and, for the baseline, its reservation counters).
  virtual AllocatorSnap allocator_snap() const = 0;
  virtual void validate() const = 0;  // every invariant; throws std::logic_error naming it
  // A hybrid model's recurrent-state slot of seq (kv/state_slot_manager.h); -1: none.
  virtual int32_t state_slot(SeqId seq) const {
    (void)seq;
    return -1;
  }
  // The state slot seq's state goes to (a prefix-cache checkpoint) once position pos is
  // computed this step; -1: none.
  virtual int32_t state_save_slot(SeqId seq, int32_t pos) const {
    (void)seq;
    (void)pos;
    return -1;
  }
};

}  // namespace kvscope
