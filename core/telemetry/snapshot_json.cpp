#include "telemetry/snapshot_json.h"

namespace kvscope {

nlohmann::json to_json(const BlockEvent& e) {
  nlohmann::json j = {{"step", e.step}, {"kind", block_event_name(e.kind)}, {"block", e.block}, {"seq", e.seq}};
  if (e.other != kNoBlock) j["source_block"] = e.other;
  if (e.group != 0) j["group"] = e.group;
  return j;
}

// Group g's blocks; a block held by several sequences (a shared prefix, parallel samples) lists
// them all under "owners" (from the sequences' tables: the snapshot keeps only the lowest).
static nlohmann::json blocks_json(const Snapshot& s, int32_t g) {
  const std::vector<BlockSnap>& v = s.group_blocks(g);
  std::vector<std::vector<SeqId>> owners(v.size());
  for (const SeqSnap& q : s.seqs) {
    if (g > 0 && q.tables_after_first_group.size() < static_cast<size_t>(g)) continue;
    for (BlockId b : q.group_table(g))
      if (b != kNoBlock && static_cast<size_t>(b) < v.size() && v[static_cast<size_t>(b)].ref_count > 1)
        owners[static_cast<size_t>(b)].push_back(q.id);
  }
  nlohmann::json blocks = nlohmann::json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const BlockSnap& b = v[i];
    nlohmann::json j = {{"status", block_status_name(b.status)}, {"ref_count", b.ref_count}, {"filled", b.filled}};
    if (b.owner >= 0) j["owner"] = b.owner;
    if (owners[i].size() > 1) j["owners"] = owners[i];
    if (b.hashed) j["hash"] = b.hash;
    if (b.sink) j["sink"] = true;
    if (b.holes > 0) j["holes"] = b.holes;
    blocks.push_back(std::move(j));
  }
  return blocks;
}

namespace {

nlohmann::json groups_json(const Snapshot& s) {
  nlohmann::json groups = nlohmann::json::array();
  for (size_t g = 0; g < s.kv_groups.size(); ++g) {
    const KvGroupSnap& k = s.kv_groups[g];
    nlohmann::json j = {{"name", k.name},
                        {"layers", k.n_layers},
                        {"window", k.window},
                        {"bytes_per_block", k.bytes_per_block},
                        {"blocks_total", k.blocks_total},
                        {"blocks_used", k.blocks_used},
                        {"blocks_cached", k.blocks_cached},
                        {"blocks_free", k.blocks_free}};
    if (g > 0) j["blocks"] = blocks_json(s, static_cast<int32_t>(g));  // group 0's are the top-level "blocks"
    groups.push_back(std::move(j));
  }
  return groups;
}

nlohmann::json seqs_json(const Snapshot& s) {
  nlohmann::json seqs = nlohmann::json::array();
  for (const SeqSnap& q : s.seqs) {
    nlohmann::json j = {{"id", q.id},
                        {"label", q.label},
                        {"state", seq_state_name(q.state)},
                        {"block_table", q.block_table},
                        {"tokens", q.tokens},
                        {"prompt_len", q.prompt_len},
                        {"generated", q.generated},
                        {"num_computed", q.num_computed},
                        {"cached_prompt_tokens", q.cached_prompt_tokens},
                        {"preemptions", q.preemptions},
                        {"ttft_ms", q.ttft_ms},
                        {"mean_itl_ms", q.mean_itl_ms}};
    if (!q.error.empty()) j["error"] = q.error;
    if (q.state_slot >= 0) j["state_slot"] = q.state_slot;
    if (!q.tables_after_first_group.empty()) j["tables_after_first_group"] = q.tables_after_first_group;
    seqs.push_back(std::move(j));
  }
  return seqs;
}

nlohmann::json counters_json(const EngineCounters& c) {
  return {{"steps", c.steps},
          {"tokens_prefilled", c.tokens_prefilled},
          {"tokens_decoded", c.tokens_decoded},
          {"preemptions", c.preemptions},
          {"allocations", c.allocations},
          {"frees", c.frees},
          {"evictions", c.evictions},
          {"prefix_cache_queries_tokens", c.prefix_queries_tokens},
          {"prefix_cache_hits_tokens", c.prefix_hits_tokens},
          {"requests_finished", c.requests_finished},
          {"requests_cancelled", c.requests_cancelled},
          {"requests_rejected", c.requests_rejected}};
}

nlohmann::json memory_json(const MemorySnap& m) {
  return {{"weights_bytes", m.weights_bytes},
          {"kv_bytes_per_token", m.kv_bytes_per_token},
          {"kv_bytes_per_block", m.kv_bytes_per_block},
          {"blocks_total", m.blocks_total},
          {"blocks_used", m.blocks_used},
          {"blocks_cached", m.blocks_cached},
          {"blocks_free", m.blocks_free},
          {"kv_used_bytes", static_cast<int64_t>(m.blocks_used) * m.kv_bytes_per_block},
          {"kv_cached_bytes", static_cast<int64_t>(m.blocks_cached) * m.kv_bytes_per_block},
          {"kv_free_bytes", static_cast<int64_t>(m.blocks_free) * m.kv_bytes_per_block},
          {"kv_pool_bytes_all_groups", m.kv_pool_bytes},
          {"kv_used_bytes_all_groups", m.kv_used_bytes},
          {"slots_reserved", m.slots_reserved},
          {"slots_filled", m.slots_filled},
          {"waste_pct", m.waste_pct}};
}

nlohmann::json allocator_json(const AllocatorSnap& a) {
  nlohmann::json ranges = nlohmann::json::array();
  for (const ArenaSnap& r : a.ranges)
    ranges.push_back({{"start", r.start}, {"length", r.length}, {"owner", r.owner}, {"filled", r.filled}});
  return {{"contiguous", a.contiguous},
          {"total_slots", a.total_slots},
          {"total_free", a.total_free},
          {"largest_free_run", a.largest_free_run},
          {"external_fragmentation", a.external_fragmentation},
          {"live_allocations", a.live_allocations},
          {"reserve_policy", a.reserve_policy},
          {"overflows", a.overflows},
          {"grown_in_place", a.grown_in_place},
          {"relocations", a.relocations},
          {"relocated_slots", a.relocated_slots},
          {"overflow_preemptions", a.overflow_preemptions},
          {"blocked_admission_steps", a.blocked_admission_steps},
          {"blocked_by_fragmentation_steps", a.blocked_by_fragmentation_steps},
          {"failed_reservations", a.failed_reservations},
          {"ranges", std::move(ranges)}};
}

// The token-eviction counters (JSON key "eviction", as the CLI and the window have always read it).
nlohmann::json token_eviction_json(const Snapshot& s) {
  return {{"policy", s.eviction.policy},
          {"holes", s.eviction.holes},
          {"tokens_evicted", s.eviction.tokens_evicted},
          {"blocks_freed", s.eviction.blocks_freed},
          {"compactions", s.eviction.compactions},
          {"rows_moved", s.eviction.rows_moved},
          {"bytes_copied", s.eviction.bytes_copied},
          {"blocks_compacted_away", s.eviction.blocks_compacted_away},
          {"tokens_hidden", s.eviction.tokens_hidden},
          {"hidden_now", s.eviction.hidden_now}};
}

// A hybrid recurrent model's state pool; null for other models.
nlohmann::json state_json(const StateSnap& t) {
  if (!t.on) return nullptr;
  nlohmann::json checkpoints = nlohmann::json::array();
  for (const StateSnap::Checkpoint& c : t.checkpoints)
    checkpoints.push_back({{"tokens", c.tokens}, {"block_hash", c.block_hash}, {"pending", c.pending}});
  return {{"dtype", t.dtype},
          {"bytes_per_slot", t.bytes_per_slot},
          {"slots_total", t.slots_total},
          {"slots_used", t.slots_used},
          {"checkpoint_policy", t.checkpoint_policy},
          {"checkpoints_total", t.checkpoints_total},
          {"checkpoints_used", t.checkpoints_used},
          {"checkpoints_saved", t.checkpoints_saved},
          {"checkpoints_restored", t.checkpoints_restored},
          {"checkpoints_evicted", t.checkpoints_evicted},
          {"checkpoints", checkpoints}};
}

}  // namespace

nlohmann::json to_json(const Snapshot& s) {
  nlohmann::json events = nlohmann::json::array();
  for (const BlockEvent& e : s.events) events.push_back(to_json(e));
  return {{"step", s.step},
          {"elapsed_s", s.elapsed_s},
          {"model", s.model},
          {"backend", s.backend},
          {"config",
           {{"block_size", s.block_size},
            {"kv_dtype", s.kv_dtype},
            {"kivi_residual", s.kivi_residual},
            {"window", s.window},
            {"sinks", s.sinks},
            {"prefix_caching", s.prefix_caching}}},
          {"blocks", blocks_json(s, 0)},
          {"kv_groups", groups_json(s)},
          {"sequences", seqs_json(s)},
          {"counters", counters_json(s.counters)},
          {"memory", memory_json(s.memory)},
          {"allocator", allocator_json(s.allocator)},
          {"eviction", token_eviction_json(s)},
          {"state", state_json(s.state)},
          {"running", s.running},
          {"waiting", s.waiting},
          {"step_ms", s.step_ms},
          {"tokens_per_s", s.tokens_per_s},
          {"events", std::move(events)}};
}

}  // namespace kvscope
