#pragma once
// The contiguous baseline behind the scheduler's KvSlotAllocator interface, so the Scheduler
// runs the SAME workload on it as on the paged KvCacheManager. A sequence's first
// allocate_slots() reserves `reserve_slots` (max_model_len) contiguous slots, first-fit, and
// fails while no free run is long enough; slot(seq, pos) = base + pos. There is no prefix cache.
// BlockCopy units are single slots here (block size 1): a fork copies the parent's filled range.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/contiguous_allocator.h"
#include "kv/kv_slot_allocator.h"

namespace kvscope {

class ContiguousKvManager : public KvSlotAllocator {
 public:
  ContiguousKvManager(int64_t total_slots, int32_t reserve_slots);
  const ContiguousAllocator& arena() const { return arena_; }
  int32_t reserve_slots() const { return reserve_; }

  int32_t attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) override;  // always 0
  int32_t blocks_needed(SeqId seq, int32_t n_new) const override;  // slots: the whole reservation, once
  // Beyond the reservation: counted as an overflow in the arena metrics, returns false.
  bool allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) override;
  int64_t slot(SeqId seq, int32_t pos) const override;
  int32_t seq_len(SeqId seq) const override;
  bool has_seq(SeqId seq) const override;
  void fork(SeqId parent, SeqId child) override;  // throws std::runtime_error when no run fits
  void free(SeqId seq) override;
  std::vector<BlockCopy> take_pending_copies() override;
  int32_t peek_cached_prefix(std::span<const TokenId> prompt) const override;  // always 0
  bool can_admit(std::span<const TokenId> prompt, int32_t n_tokens) const override;
  std::string never_fits(int32_t n_tokens, int32_t max_chunk) const override;
  void validate() const;

 private:
  struct SeqEntry {
    int32_t len = 0;        // tokens with a slot
    bool reserved = false;  // the arena holds its range (taken on the first allocate_slots)
  };
  const SeqEntry& entry(SeqId seq) const;
  ContiguousAllocator arena_;
  int32_t reserve_;
  std::unordered_map<SeqId, SeqEntry> seqs_;
  std::vector<BlockCopy> pending_copies_;
};

}  // namespace kvscope
