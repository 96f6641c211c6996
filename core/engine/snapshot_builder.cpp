#include "engine/snapshot_builder.h"

#include <algorithm>

#include "kv/state_slot_manager.h"

namespace kvscope {

namespace {

// The leading blocks of a table that hold attention-sink positions.
void mark_sink_blocks(const std::vector<BlockId>& table, int32_t block_size, int32_t sinks,
                      std::vector<BlockSnap>& blocks) {
  for (size_t lb = 0; lb < table.size() && static_cast<int64_t>(lb) * block_size < sinks; ++lb)
    if (table[lb] != kNoBlock) blocks[static_cast<size_t>(table[lb])].sink = true;
}

SeqSnap seq_snap_of(const RequestRecord& rt, const KvSlotAllocator& kv) {
  const Sequence& s = rt.seq;
  SeqSnap q;
  q.id = s.id;
  q.label = rt.label;
  q.state = s.state;
  q.tokens = s.tokens;
  q.prompt_len = s.prompt_len;
  q.generated = s.num_generated();
  q.num_computed = s.num_computed;
  q.cached_prompt_tokens = s.num_cached_prompt;
  q.preemptions = s.preemptions;
  q.ttft_ms = rt.ttft_ms;
  q.mean_itl_ms = rt.itl_count ? rt.itl_sum_ms / rt.itl_count : -1;
  q.error = s.error;
  if (kv.has_seq(s.id)) {
    q.block_table = kv.group_block_table(s.id, 0);  // the blocks' owners are already in S.blocks
    for (int32_t g = 1; g < kv.num_groups(); ++g) q.tables_after_first_group.push_back(kv.group_block_table(s.id, g));
  }
  return q;
}

void fill_sequences(const SnapshotSources& src, Snapshot& S) {
  std::vector<SeqId> ids;
  for (const auto& [id, rt] : src.requests) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (SeqId id : ids) S.seqs.push_back(seq_snap_of(*src.requests.at(id), src.kv));
}

void fill_memory(const SnapshotSources& src, const KvLayout& L, Snapshot& S) {
  const BlockTotals& t = src.recorder.totals(0);
  MemorySnap& M = S.memory;
  M.blocks_total = static_cast<int32_t>(S.blocks.size());
  M.blocks_used = t.used;
  M.blocks_cached = t.cached;
  M.blocks_free = M.blocks_total - t.used - t.cached;
  M.weights_bytes = static_cast<int64_t>(src.model.weights.total_bytes);
  M.kv_bytes_per_token = L.bytes_per_token();
  M.kv_bytes_per_block = L.bytes_per_block();
  M.slots_reserved = static_cast<int64_t>(M.blocks_used) * L.block_size;
  M.slots_filled = t.filled;
  M.waste_pct = M.slots_reserved ? 100.0 * (1.0 - static_cast<double>(t.filled) / M.slots_reserved) : 0.0;
  M.kv_pool_bytes = src.backend.kv_total_bytes();
  M.kv_used_bytes = static_cast<int64_t>(M.blocks_used) * L.bytes_per_block();
  S.allocator = src.kv.allocator_snap();
  if (S.allocator.contiguous) {
    // The baseline's waste counts every reserved slot, not just the blocks touched so far.
    M.slots_reserved = S.allocator.slots_reserved;
    M.slots_filled = S.allocator.slots_filled;
    M.waste_pct = S.allocator.waste_pct;
  }
}

// gemma4: a pool's head shape and the layers that read its KV without storing any, e.g.
// " · 2 KV heads x 512 · layers 19,24 read it"; "" for the other models.
std::string shape_note(const ModelConfig& c, const KvLayout& L, bool sliding) {
  if (c.shapes.empty()) return {};
  std::string borrowers;
  for (int32_t il = 0; il < c.n_layer; ++il)
    if (!c.layer_owns_kv(il) && c.layer_is_swa(il) == sliding)
      borrowers += (borrowers.empty() ? "" : ",") + std::to_string(il);
  return " · " + std::to_string(L.n_head_kv) + " KV heads x " + std::to_string(L.head_dim) +
         (borrowers.empty() ? "" : " · layers " + borrowers + " read it (no KV of their own)");
}

// The hybrid KV cache's groups: metadata for both, blocks of the sliding group (group 0's are
// the snapshot's blocks, as for a single-group model).
void fill_kv_groups(const SnapshotSources& src, Snapshot& S) {
  const std::vector<KvLayout> G = src.backend.kv_group_layouts();
  const int32_t window = src.cfg.window;
  S.kv_groups.resize(2);
  KvGroupSnap& g0 = S.kv_groups[0];
  g0.name = (window > 0 ? "global layers (window " + std::to_string(window) + ")" : "global layers") +
            shape_note(src.model.config, G[0], false);
  g0.n_layers = G[0].n_layer;
  g0.window = window;
  g0.bytes_per_block = G[0].bytes_per_block();
  g0.blocks_total = S.memory.blocks_total;
  g0.blocks_used = S.memory.blocks_used;
  g0.blocks_cached = S.memory.blocks_cached;
  g0.blocks_free = S.memory.blocks_free;
  KvGroupSnap& g1 = S.kv_groups[1];
  g1.name =
      "sliding layers (window " + std::to_string(src.sliding_window) + ")" + shape_note(src.model.config, G[1], true);
  g1.n_layers = G[1].n_layer;
  g1.window = src.sliding_window;
  g1.bytes_per_block = G[1].bytes_per_block();
  g1.blocks = src.recorder.blocks(1);
  for (const SeqSnap& q : S.seqs)
    if (!q.tables_after_first_group.empty())
      mark_sink_blocks(q.tables_after_first_group[0], G[1].block_size, src.cfg.sinks_in_sliding_layers ? S.sinks : 0,
                       g1.blocks);
  const BlockTotals& t = src.recorder.totals(1);
  g1.blocks_total = src.kv.num_blocks(1);
  g1.blocks_used = t.used;
  g1.blocks_cached = t.cached;
  g1.blocks_free = g1.blocks_total - t.used - t.cached;
  S.memory.kv_used_bytes += static_cast<int64_t>(g1.blocks_used) * g1.bytes_per_block;
}

void fill_eviction(const SnapshotSources& src, const KvLayout& L, Snapshot& S) {
  if (!src.cfg.evict.on()) return;
  EvictionSnap& E = S.eviction;
  const TokenEvictionCounters c = src.kv.token_eviction_counters();
  E.policy = describe_evict(src.cfg.evict);
  for (const BlockSnap& b : S.blocks) E.holes += b.holes;
  E.tokens_evicted = c.tokens_evicted;
  E.blocks_freed = c.blocks_freed;
  E.compactions = c.compactions;
  E.rows_moved = c.rows_moved;
  E.bytes_copied = static_cast<int64_t>(c.rows_moved) * L.bytes_per_token();
  E.blocks_compacted_away = c.blocks_compacted_away;
  E.tokens_hidden = c.tokens_hidden;
  E.hidden_now = c.hidden_now;
}

void fill_state(const SnapshotSources& src, Snapshot& S) {
  const auto* slots = dynamic_cast<const StateSlotManager*>(&src.kv);
  if (!slots) return;
  StateSnap& T = S.state;
  const StateCheckpointPool& pool = slots->checkpoints();
  T.on = true;
  T.dtype = state_dtype_name(src.backend.state_dtype());
  T.bytes_per_slot = src.backend.state_bytes_per_slot();
  T.slots_total = slots->num_state_slots();
  T.slots_used = slots->used_state_slots();
  T.checkpoint_policy = pool.capacity() > 0 ? checkpoint_policy_name(slots->checkpoint_policy()) : "off";
  T.checkpoints_total = pool.capacity();
  T.checkpoints_used = pool.used();
  T.checkpoints_saved = pool.counters().saved;
  T.checkpoints_restored = pool.counters().restored;
  T.checkpoints_evicted = pool.counters().evicted;
  for (const StateCheckpointPool::Held& h : pool.held()) T.checkpoints.push_back({h.key, h.tokens, h.pending});
  for (SeqSnap& q : S.seqs) q.state_slot = slots->state_slot(q.id);
}

}  // namespace

std::shared_ptr<Snapshot> build_snapshot(const SnapshotSources& src, std::vector<BlockEvent> events) {
  auto snap = std::make_shared<Snapshot>();
  Snapshot& S = *snap;
  const KvLayout& L = src.backend.kv_layout();
  S.step = src.counters.steps;
  S.elapsed_s = src.elapsed_s;
  S.model = src.model.describe();
  S.backend = src.backend.name();
  S.block_size = L.block_size;
  S.kv_dtype = kv_dtype_name(L.dtype);
  S.kivi_residual = L.kivi_residual;
  S.window = src.cfg.window;
  S.sinks = src.cfg.sinks;
  S.prefix_caching = src.cfg.prefix_caching;
  // The recorder has just brought its block states up to date for every block the allocator
  // touched (the only ones that can differ), so copying them is the whole pool's state for the
  // price of a memcpy, where asking the pool block by block cost a pass over all of them.
  S.blocks = src.recorder.blocks(0);
  fill_sequences(src, S);
  for (const SeqSnap& q : S.seqs) mark_sink_blocks(q.block_table, L.block_size, S.sinks, S.blocks);
  fill_memory(src, L, S);
  fill_eviction(src, L, S);
  fill_state(src, S);
  S.running = src.running;
  S.waiting = src.waiting;
  S.counters = src.counters;
  S.step_ms = src.step_ms;
  S.tokens_per_s = src.tokens_per_s;
  if (src.kv.num_groups() > 1) fill_kv_groups(src, S);
  S.events = std::move(events);
  return snap;
}

}  // namespace kvscope
