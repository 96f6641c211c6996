#pragma once
// The contiguous baseline behind the scheduler's KvSlotAllocator interface, so the Scheduler
// runs the SAME workload on it as on the paged KvCacheManager. A sequence's first
// allocate_slots() reserves a contiguous range sized by the BaselineReserve policy
// (kv/baseline_reserve.h), first-fit, and fails while no free run is long enough;
// slot(seq, pos) = base + pos. There is no prefix cache.
//
// Every reservation is a multiple of `unit` slots (the engine's block size), so every base is
// block-aligned and the backend can walk a run of consecutive blocks as a block table. K/V
// copies (a fork, a relocation) come out of take_pending_copies() as one BlockCopy per unit of
// the copied range, in unit numbers, exactly as the backend copies paged blocks; with unit 1
// (the unit tests) they are single slots.
//
// A sequence that outgrows its reservation (Fixed, or Request after a recompute) does not stop:
// the reservation doubles (at least to what is needed, at most to max_model_len) in place when
// the run after it is free, else moves to the first free run of the new size (its filled slots
// are copied), else allocate_slots() fails and the scheduler preempts, as the paged engine does
// when its pool is full.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/baseline_reserve.h"
#include "kv/contiguous_allocator.h"
#include "kv/kv_slot_allocator.h"

namespace kvscope {

// What the baseline did beyond plain reservations, over the manager's life.
struct BaselineCounters {
  uint64_t overflows = 0;             // a sequence needed more than its reservation (once per size)
  uint64_t grown_in_place = 0;        // ... and the free run after it took the growth
  uint64_t relocations = 0;           // ... and it moved to a larger run (realloc)
  uint64_t relocated_slots = 0;       // filled slots those moves copied
  uint64_t overflow_preemptions = 0;  // ... and it was freed (preempted) before it could grow
  uint64_t refused_overflows = 0;     // needed more than max_model_len: refused (the scheduler caps first)
  // Steps in which the head of the queue was refused by can_admit(), and of those the ones in
  // which the free slots in all would have held its reservation but no single run did.
  uint64_t blocked_admission_steps = 0;
  uint64_t blocked_by_fragmentation_steps = 0;
};

class ContiguousKvManager : public KvSlotAllocator {
 public:
  // max_model_len: the MaxModelLen reservation and the most any reservation grows to.
  ContiguousKvManager(int64_t total_slots, int32_t max_model_len, BaselineReserve policy = {}, int32_t unit = 1);
  const ContiguousAllocator& arena() const { return arena_; }
  const BaselineReserve& policy() const { return policy_; }
  const BaselineCounters& counters() const { return counters_; }
  int32_t unit() const { return unit_; }
  // Slots a new request reserves: its first n_tokens tokens and at most max_len in all.
  int32_t reservation_for(int32_t n_tokens, int32_t max_len) const;

  int32_t attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) override;  // always 0
  int32_t blocks_needed(SeqId seq, int32_t n_new) const override;                     // slots newly reserved
  // Beyond the reservation: grows it (see above); false when there is no room to grow.
  bool allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) override;
  int64_t slot(SeqId seq, int32_t pos) const override;
  int32_t seq_len(SeqId seq) const override;
  bool has_seq(SeqId seq) const override;
  void fork(SeqId parent, SeqId child) override;  // throws std::runtime_error when no run fits
  void free(SeqId seq) override;
  std::vector<BlockCopy> take_pending_copies() override;
  int32_t peek_cached_prefix(std::span<const TokenId> prompt) const override;  // always 0
  bool can_admit(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len) const override;
  std::string never_fits(int32_t n_tokens, int32_t max_chunk) const override;
  void set_max_len(SeqId seq, int32_t max_len) override;
  void admission_blocked(std::span<const TokenId> prompt, int32_t n_tokens, int32_t max_len) override;
  void validate() const override;

  // Read-only view (KvSlotAllocator), in units of `unit` slots (the engine's block size): a
  // block is used when a reservation covers it and filled by the slots written. The arena keeps
  // no change log, so every block is reported each time; a reservation's table is its run of
  // consecutive blocks.
  int32_t num_blocks(int32_t group) const override;
  std::vector<BlockId> group_block_table(SeqId seq, int32_t group) const override;
  void take_block_changes(int32_t group, std::vector<BlockChange>& out) override;
  KvAllocatorCounters allocator_counters() const override;
  AllocatorSnap allocator_snap() const override;

 private:
  struct SeqEntry {
    int32_t len = 0;            // tokens with a slot
    int32_t max_len = 0;        // the request's limit (set_max_len; max_model_len when never told)
    bool reserved = false;      // the arena holds its range (taken on the first allocate_slots)
    int32_t overflowed_at = 0;  // reservation size whose overflow was counted (0: none pending)
  };
  const SeqEntry& entry(SeqId seq) const;
  int32_t round_up(int64_t slots) const;
  int32_t ceiling() const;  // the largest reservation: max_model_len, or the arena if smaller
  int32_t growth_target(int32_t reserved, int32_t needed) const;
  bool grow(SeqId seq, SeqEntry& e, int32_t needed);
  void copy_slots(int64_t src, int64_t dst, int32_t n);  // queues BlockCopy units

  ContiguousAllocator arena_;
  int32_t max_model_len_;
  BaselineReserve policy_;
  int32_t unit_;
  BaselineCounters counters_;
  std::unordered_map<SeqId, SeqEntry> seqs_;
  std::vector<BlockCopy> pending_copies_;
};

}  // namespace kvscope
