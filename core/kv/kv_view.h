#pragma once
// What an allocator shows of itself to telemetry: the state of one block and the shape of the
// free space. KvSlotAllocator's read-only view (kv/kv_slot_allocator.h) speaks in these types,
// so the engine's snapshot builder reads every allocator the same way.
#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_types.h"

namespace kvscope {

enum class BlockStatus : uint8_t { Free, Used, Cached };  // Cached: ref 0 but hashed (evictable)
const char* block_status_name(BlockStatus s);

struct BlockSnap {
  BlockStatus status = BlockStatus::Free;
  int32_t ref_count = 0;
  int32_t filled = 0;  // slots holding a token
  int32_t holes = 0;   // of those, evicted (token eviction): holes inside the block
  bool hashed = false;
  BlockHash hash = 0;
  SeqId owner = -1;   // lowest owning sequence id (-1: none); all owners via seq tables
  bool sink = false;  // holds attention-sink positions of some sequence
};

// How the allocator's free space looks. Paged: any free block serves any sequence, so the
// largest usable run is all free memory. Contiguous baseline: the arena's runs and holes.
struct ArenaSnap {
  int64_t start = 0, length = 0;  // in slots
  SeqId owner = -1;               // -1: free
  int32_t filled = 0;
};
struct AllocatorSnap {
  bool contiguous = false;
  int64_t total_slots = 0;
  int64_t total_free = 0;             // slots
  int64_t largest_free_run = 0;       // slots a single new request could use
  double external_fragmentation = 0;  // 1 - largest_free_run / total_free
  int32_t live_allocations = 0;
  // Baseline only (kv/contiguous_kv_manager.h BaselineCounters):
  std::string reserve_policy;                   // "max-model-len", "request" or the fixed guess N
  uint64_t overflows = 0;                       // a sequence outgrew its reservation
  uint64_t grown_in_place = 0;                  // ... the free run after it took the growth
  uint64_t relocations = 0;                     // ... it moved to a larger run, K/V copied
  uint64_t relocated_slots = 0;                 // slots those moves copied
  uint64_t overflow_preemptions = 0;            // ... it was preempted before it could grow
  uint64_t blocked_admission_steps = 0;         // steps the head of the queue found no run
  uint64_t blocked_by_fragmentation_steps = 0;  // ... although the free slots in all sufficed
  uint64_t failed_reservations = 0;             // no contiguous run was long enough
  std::vector<ArenaSnap> ranges;                // baseline only, address order
  // Baseline only: every reserved slot counts, not just the blocks touched so far.
  int64_t slots_reserved = 0, slots_filled = 0;
  double waste_pct = 0;
};

// Allocation counters since the start, summed over KV groups.
struct KvAllocatorCounters {
  uint64_t allocations = 0;  // blocks taken (baseline: contiguous reservations made)
  uint64_t frees = 0;        // blocks given back (baseline: reservations released)
  uint64_t evictions = 0;    // prefix-cache evictions: a cached block reused (kv/eviction_log.h)
  uint64_t prefix_queries_tokens = 0;
  uint64_t prefix_hits_tokens = 0;
};

// Token eviction's books (kv/token_holes.h), monotonic since the start. Not the prefix
// cache's evictions (KvAllocatorCounters::evictions, kv/eviction_log.h).
struct TokenEvictionCounters {
  uint64_t tokens_evicted = 0;  // slots turned into holes
  uint64_t blocks_freed = 0;    // blocks whose every slot became a hole, back in the pool
  uint64_t compactions = 0;
  uint64_t rows_moved = 0;             // slots copied by compactions (x bytes per token = bytes copied)
  uint64_t blocks_compacted_away = 0;  // blocks compaction emptied and returned to the pool
  uint64_t tokens_hidden = 0;          // per-layer token eviction: (layer, token) pairs hidden from one layer
  uint64_t hidden_now =
      0;  // per-layer token eviction: such pairs now whose slot is not (yet) a hole (a state, not a counter)
};

// One block whose state may have changed, with its state now.
struct BlockChange {
  BlockId block = kNoBlock;
  BlockSnap now;
};

}  // namespace kvscope
