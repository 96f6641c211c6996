#pragma once
// Everything a panel draws, copied out of the engine after a step. Immutable once published
// (shared_ptr<const Snapshot>), so the UI thread reads it without ever locking the engine.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "types/seq_state.h"
#include "kv/kv_types.h"
#include "kv/kv_view.h"

namespace kvscope {

enum class BlockEventKind : uint8_t {
  Allocated,
  Freed,
  Shared,
  CopiedOnWrite,
  Cached,
  CacheHit,
  Evicted,
  Preempted,
  DroppedOutOfWindow
};
const char* block_event_name(BlockEventKind k);

struct BlockEvent {
  uint64_t step = 0;
  BlockEventKind kind = BlockEventKind::Allocated;
  BlockId block = kNoBlock;
  SeqId seq = -1;
  BlockId other = kNoBlock;  // CopiedOnWrite: the source block
  int32_t group = 0;         // KV group of the block(s) (hybrid KV cache: 1 = sliding layers)
};

struct SeqSnap {
  SeqId id = 0;
  std::string label;  // e.g. "chat 2", "req 7"
  SeqState state = SeqState::Waiting;
  std::vector<BlockId> block_table;  // logical -> physical, kNoBlock where dropped (KV group 0)
  std::vector<std::vector<BlockId>> tables_after_first_group;  // [group - 1]: tables of KV groups 1..
  std::vector<TokenId> tokens;                                 // prompt + generated
  int32_t prompt_len = 0;
  int32_t generated = 0;
  int32_t num_computed = 0;          // tokens whose K/V are in the cache
  int32_t cached_prompt_tokens = 0;  // prompt tokens reused from the prefix cache
  int32_t preemptions = 0;
  int32_t state_slot = -1;  // hybrid recurrent models: the state slot it holds (-1: none)
  double ttft_ms = -1;      // -1 until the first token
  double mean_itl_ms = -1;  // mean inter-token latency
  std::string error;
  const std::vector<BlockId>& group_table(int32_t g) const {
    return g == 0 ? block_table : tables_after_first_group.at(static_cast<size_t>(g - 1));
  }
};

struct EngineCounters {
  uint64_t steps = 0;
  uint64_t tokens_prefilled = 0;  // prompt tokens computed (not counting prefix hits)
  uint64_t tokens_decoded = 0;    // generated tokens
  uint64_t preemptions = 0;
  uint64_t allocations = 0;  // blocks taken (baseline: contiguous reservations made)
  uint64_t frees = 0;        // blocks given back (baseline: reservations released)
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
  int64_t slots_reserved = 0;  // used blocks x block_size
  int64_t slots_filled = 0;    // tokens actually stored
  double waste_pct = 0;        // 100 * (1 - filled / reserved)
  // Every KV group together (the fields above describe group 0, the only one unless hybrid).
  int64_t kv_pool_bytes = 0;
  int64_t kv_used_bytes = 0;
};

// Token eviction (--evict): what it has done so far and the holes it leaves now.
struct EvictionSnap {
  std::string policy = "off";   // "h2o:20%", "snapkv:512", "off"
  int64_t holes = 0;            // evicted slots inside held blocks now
  uint64_t tokens_evicted = 0;  // since the start
  uint64_t blocks_freed = 0;    // blocks whose every slot was evicted
  uint64_t compactions = 0;
  uint64_t rows_moved = 0;             // slots compaction copied
  int64_t bytes_copied = 0;            // rows_moved x KV bytes per token (every layer, K and V)
  uint64_t blocks_compacted_away = 0;  // blocks compaction emptied
  // Per-layer eviction ("h2o:20%:layer"): (layer, token) pairs one layer dropped, since the start
  // and now (while some other layer still keeps the token, its slot is not a hole).
  uint64_t tokens_hidden = 0;
  uint64_t hidden_now = 0;
};

// A hybrid recurrent model's state pool beside the KV pools (kv/state_slot_manager.h): a fixed
// slot per running sequence, and the prefix cache's state checkpoints (kv/state_checkpoint_pool.h).
// The state pool's sizes and counters (what a run's summary keeps of it).
struct StatePoolCounts {
  bool on = false;             // the model has recurrent layers
  std::string dtype;           // "f32", "f16", "bf16"
  int64_t bytes_per_slot = 0;  // one sequence's state (a checkpoint is one too)
  int32_t slots_total = 0, slots_used = 0;
  std::string checkpoint_policy = "off";  // "every:8", "prompt-end", "off"
  int32_t checkpoints_total = 0, checkpoints_used = 0;
  uint64_t checkpoints_saved = 0, checkpoints_restored = 0, checkpoints_evicted = 0;  // since the start
};

struct StateSnap : StatePoolCounts {
  // Each held checkpoint: the hash of the KV block (group 0) its prefix ends on, and its length.
  struct Checkpoint {
    uint64_t block_hash = 0;
    int32_t tokens = 0;
    bool pending = false;  // written by the step now running, not yet a hit
  };
  std::vector<Checkpoint> checkpoints;
};

// One KV group of the hybrid KV cache (layers sharing a block pool and block tables).
struct KvGroupSnap {
  std::string name;  // "global layers", "sliding layers (window 512)"
  int32_t n_layers = 0;
  int32_t window = 0;  // 0: full attention
  int64_t bytes_per_block = 0;
  int32_t blocks_total = 0, blocks_used = 0, blocks_cached = 0, blocks_free = 0;
  std::vector<BlockSnap> blocks;  // [num_blocks]; left empty for group 0 (see Snapshot::blocks)
};

struct Snapshot {
  uint64_t step = 0;
  double elapsed_s = 0;  // engine wall time since start
  std::string model;     // Model::describe()
  std::string backend;
  int32_t block_size = 16;
  std::string kv_dtype = "f32";
  int32_t kivi_residual = 0;  // KIVI: tokens kept in f16 beyond the block being filled (EngineConfig)
  int32_t window = 0, sinks = 0;
  bool prefix_caching = true;
  std::vector<BlockSnap> blocks;  // [num_blocks] of KV group 0
  // The hybrid KV cache's groups, group 0 first; empty when the model has one KV group.
  std::vector<KvGroupSnap> kv_groups;
  int32_t n_kv_groups() const { return kv_groups.empty() ? 1 : static_cast<int32_t>(kv_groups.size()); }
  const std::vector<BlockSnap>& group_blocks(int32_t g) const {
    return g == 0 ? blocks : kv_groups.at(static_cast<size_t>(g)).blocks;
  }
  std::vector<SeqSnap> seqs;  // live and recently finished
  EngineCounters counters;
  MemorySnap memory;
  AllocatorSnap allocator;
  EvictionSnap eviction;
  StateSnap state;
  int32_t running = 0, waiting = 0;  // scheduler queues after the step
  double step_ms = 0;                // duration of the last step
  double tokens_per_s = 0;           // generated tokens per second over the last second or so
  std::vector<BlockEvent> events;    // since the previous snapshot built: the step's own when published every step
};

using SnapshotPtr = std::shared_ptr<const Snapshot>;

}  // namespace kvscope
