#pragma once
// Everything a panel draws, copied out of the engine after a step. Immutable once published
// (shared_ptr<const Snapshot>), so the UI thread reads it without ever locking the engine.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_types.h"

namespace kvscope {

enum class BlockStatus : uint8_t { Free, Used, Cached };  // Cached: ref 0 but hashed (evictable)
const char* block_status_name(BlockStatus s);

struct BlockSnap {
  BlockStatus status = BlockStatus::Free;
  int32_t ref_count = 0;
  int32_t filled = 0;          // slots holding a token
  bool hashed = false;
  BlockHash hash = 0;
  SeqId owner = -1;            // lowest owning sequence id (-1: none); all owners via seq tables
  bool sink = false;           // holds attention-sink positions of some sequence
};

enum class BlockEventKind : uint8_t { Allocated, Freed, Shared, CopiedOnWrite, Cached, CacheHit, Evicted, Preempted, DroppedOutOfWindow };
const char* block_event_name(BlockEventKind k);

struct BlockEvent {
  uint64_t step = 0;
  BlockEventKind kind = BlockEventKind::Allocated;
  BlockId block = kNoBlock;
  SeqId seq = -1;
  BlockId other = kNoBlock;    // CopiedOnWrite: the source block
  int32_t group = 0;           // KV group of the block(s) (hybrid KV cache: 1 = sliding layers)
};

struct SeqSnap {
  SeqId id = 0;
  std::string label;           // e.g. "chat 2", "req 7"
  SeqState state = SeqState::Waiting;
  std::vector<BlockId> block_table;   // logical -> physical, kNoBlock where dropped (KV group 0)
  std::vector<std::vector<BlockId>> more_block_tables;  // [group - 1]: tables of KV groups 1..
  std::vector<TokenId> tokens;        // prompt + generated
  int32_t prompt_len = 0;
  int32_t generated = 0;
  int32_t num_computed = 0;           // tokens whose K/V are in the cache
  int32_t cached_prompt_tokens = 0;   // prompt tokens reused from the prefix cache
  int32_t preemptions = 0;
  double ttft_ms = -1;                // -1 until the first token
  double mean_itl_ms = -1;            // mean inter-token latency
  std::string error;
  const std::vector<BlockId>& group_table(int32_t g) const { return g == 0 ? block_table : more_block_tables.at(static_cast<size_t>(g - 1)); }
};

struct EngineCounters {
  uint64_t steps = 0;
  uint64_t tokens_prefilled = 0;      // prompt tokens computed (not counting prefix hits)
  uint64_t tokens_decoded = 0;        // generated tokens
  uint64_t preemptions = 0;
  uint64_t allocations = 0;           // blocks taken (baseline: contiguous reservations made)
  uint64_t frees = 0;                 // blocks given back (baseline: reservations released)
  uint64_t evictions = 0;
  uint64_t prefix_queries_tokens = 0;
  uint64_t prefix_hits_tokens = 0;
  uint64_t requests_finished = 0;
  uint64_t requests_cancelled = 0;
  uint64_t requests_rejected = 0;
};

struct MemorySnap {
  int64_t weights_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  int64_t kv_bytes_per_block = 0;
  int32_t blocks_total = 0, blocks_used = 0, blocks_cached = 0, blocks_free = 0;
  int64_t slots_reserved = 0;         // used blocks x block_size
  int64_t slots_filled = 0;           // tokens actually stored
  double waste_pct = 0;               // 100 * (1 - filled / reserved)
  // Every KV group together (the fields above describe group 0, the only one unless hybrid).
  int64_t kv_pool_bytes = 0;
  int64_t kv_used_bytes = 0;
};

// One KV group of the hybrid KV cache (layers sharing a block pool and block tables).
struct KvGroupSnap {
  std::string name;                   // "global layers", "sliding layers (window 512)"
  int32_t n_layers = 0;
  int32_t window = 0;                 // 0: full attention
  int64_t bytes_per_block = 0;
  int32_t blocks_total = 0, blocks_used = 0, blocks_cached = 0, blocks_free = 0;
  std::vector<BlockSnap> blocks;      // [num_blocks]; left empty for group 0 (see Snapshot::blocks)
};

// How the allocator's free space looks. Paged: any free block serves any sequence, so the
// largest usable run is all free memory. Contiguous baseline: the arena's runs and holes.
struct ArenaSnap {
  int64_t start = 0, length = 0;      // in slots
  SeqId owner = -1;                   // -1: free
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
  std::string reserve_policy;         // "max-model-len", "request" or the fixed guess N
  uint64_t overflows = 0;             // a sequence outgrew its reservation
  uint64_t grown_in_place = 0;        // ... the free run after it took the growth
  uint64_t relocations = 0;           // ... it moved to a larger run, K/V copied
  uint64_t relocated_slots = 0;       // slots those moves copied
  uint64_t overflow_preemptions = 0;  // ... it was preempted before it could grow
  uint64_t blocked_admission_steps = 0;         // steps the head of the queue found no run
  uint64_t blocked_by_fragmentation_steps = 0;  // ... although the free slots in all sufficed
  uint64_t failed_reservations = 0;   // no contiguous run was long enough
  std::vector<ArenaSnap> ranges;      // baseline only, address order
};

struct Snapshot {
  uint64_t step = 0;
  double elapsed_s = 0;               // engine wall time since start
  std::string model;                  // Model::describe()
  std::string backend;
  int32_t block_size = 16;
  std::string kv_dtype = "f32";
  int32_t window = 0, sinks = 0;
  bool prefix_caching = true;
  std::vector<BlockSnap> blocks;      // [num_blocks] of KV group 0
  // The hybrid KV cache's groups, group 0 first; empty when the model has one KV group.
  std::vector<KvGroupSnap> kv_groups;
  int32_t n_kv_groups() const { return kv_groups.empty() ? 1 : static_cast<int32_t>(kv_groups.size()); }
  const std::vector<BlockSnap>& group_blocks(int32_t g) const { return g == 0 ? blocks : kv_groups.at(static_cast<size_t>(g)).blocks; }
  std::vector<SeqSnap> seqs;          // live and recently finished
  EngineCounters counters;
  MemorySnap memory;
  AllocatorSnap allocator;
  int32_t running = 0, waiting = 0;   // scheduler queues after the step
  double step_ms = 0;                 // duration of the last step
  double tokens_per_s = 0;            // generated tokens per second over the last second or so
  std::vector<BlockEvent> events;     // since the previous snapshot built: the step's own when published every step
};

using SnapshotPtr = std::shared_ptr<const Snapshot>;

}  // namespace kvscope
