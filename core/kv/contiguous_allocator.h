#pragma once
// The "traditional" pre-paging KV allocator, kept only to measure what paging saves on the SAME
// workload: one arena of token slots, every admitted request reserves a contiguous range sized
// for its worst case (max_model_len) up front, first-fit, and freed ranges merge with free
// neighbours. Reserved-but-unfilled slots are internal waste; free slots split into runs too
// short for a reservation are external fragmentation. Independent of the paged manager.
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv/kv_types.h"

namespace kvscope {

constexpr SeqId kFreeRange = -1;  // ArenaRange::owner of a free run

struct ArenaRange {
  int64_t start = 0;
  int64_t length = 0;
  SeqId owner = kFreeRange;  // kFreeRange: free
  int32_t filled = 0;        // slots written from start (owned ranges)
};

struct ArenaMetrics {
  int64_t total_slots = 0;
  int64_t slots_reserved = 0;
  int64_t slots_filled = 0;
  double waste_pct = 0.0;  // 100 * (1 - filled / reserved); 0 when nothing is reserved
  int64_t total_free = 0;
  int64_t largest_free_run = 0;
  double external_fragmentation = 0.0;  // 1 - largest_free_run / total_free; 0 when nothing is free
  int32_t live_allocations = 0;
  int64_t peak_reserved = 0;
  uint64_t overflows = 0;            // set_filled beyond the reservation (reported, refused)
  uint64_t failed_reservations = 0;  // no contiguous run was long enough
};

class ContiguousAllocator {
 public:
  explicit ContiguousAllocator(int64_t total_slots);
  int64_t total_slots() const { return total_; }

  // First-fit: the lowest free run of at least n_slots; nullopt when none is long enough.
  std::optional<int64_t> reserve(SeqId seq, int32_t n_slots);
  void release(SeqId seq);                     // no-op for an unknown sequence
  bool set_filled(SeqId seq, int32_t filled);  // beyond the reservation: false, +1 overflow, fill kept
  bool can_reserve(int32_t n_slots) const;     // a free run of n_slots exists now
  // realloc() for a reservation that must grow to new_length slots (fill kept):
  // extend() takes the slots from the free run right after it, if that run is long enough;
  // relocate() moves it to the first free run of new_length that does not overlap it (the old
  // range is still held while its K/V are copied, as with malloc + copy + free) and returns
  // the new base. Both return false / nullopt and change nothing when there is no room.
  bool extend(SeqId seq, int32_t new_length);
  std::optional<int64_t> relocate(SeqId seq, int32_t new_length);

  bool has(SeqId seq) const { return owner_start_.contains(seq); }
  uint64_t reservations() const { return reservations_; }  // ranges taken by reserve()
  uint64_t releases() const { return releases_; }          // ranges given back by release()
  int64_t base(SeqId seq) const;
  int32_t reserved(SeqId seq) const;
  int32_t filled(SeqId seq) const;

  ArenaMetrics metrics() const;
  std::vector<ArenaRange> ranges() const;  // the whole arena in address order (the UI's bar)
  void validate() const;                   // ranges tile the arena, no two free runs adjacent

 private:
  struct Range {
    int64_t length;
    SeqId owner;
    int32_t filled;
  };
  const Range& owned(SeqId seq) const;
  // First-fit free run of n_slots: carved out for seq (the caller updates owner_start_).
  std::optional<int64_t> carve(SeqId seq, int32_t n_slots);
  void free_range(std::map<int64_t, Range>::iterator it);  // marks free, merges with neighbours
  std::map<int64_t, Range> ranges_;                        // start -> range; tiles [0, total_)
  std::unordered_map<SeqId, int64_t> owner_start_;         // live reservations
  int64_t total_ = 0;
  int64_t reserved_ = 0;
  int64_t filled_ = 0;
  int64_t peak_reserved_ = 0;
  uint64_t overflows_ = 0;
  uint64_t failed_ = 0;
  uint64_t reservations_ = 0, releases_ = 0;
};

}  // namespace kvscope
