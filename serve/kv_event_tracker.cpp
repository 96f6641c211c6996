#include "serve/kv_event_tracker.h"

#include <algorithm>
#include <unordered_map>

namespace kvscope::serve {
namespace {

// The pools of every KV group: group 0 alone, or the hybrid cache's groups.
std::vector<const KvCacheManager*> groups_of(const Engine& e) {
  if (const HybridKvManager* h = e.hybrid_kv()) {
    std::vector<const KvCacheManager*> g;
    for (int i = 0; i < HybridKvManager::kGroups; ++i) g.push_back(&h->group(i));
    return g;
  }
  if (const KvCacheManager* p = e.paged_kv()) return {p};
  return {};
}

}  // namespace

KvEventTracker::KvEventTracker(const Engine& e) {
  for (const KvCacheManager* m : groups_of(e)) prev_.emplace_back(static_cast<size_t>(m->pool().num_blocks()));
}

std::vector<KvEvent> KvEventTracker::update(const Engine& e) {
  std::vector<KvEvent> out;
  const std::vector<const KvCacheManager*> groups = groups_of(e);
  // A hybrid model's attention layers are one KV cache group among several: the sliding
  // layers', or the recurrent layers' state (which publishes no blocks: a state is no prefix).
  const bool hybrid = groups.size() > 1 || e.state_slots() != nullptr;
  for (size_t g = 0; g < groups.size() && g < prev_.size(); ++g) {
    const KvCacheManager& m = *groups[g];
    const BlockPool& pool = m.pool();
    std::vector<Seen>& prev = prev_[g];
    KvBlockRemoved removed;
    std::vector<BlockId> stored;
    for (BlockId b = 0; b < static_cast<BlockId>(prev.size()); ++b) {
      const BlockState& st = pool.state(b);
      Seen& p = prev[static_cast<size_t>(b)];
      const bool changed = st.hashed != p.hashed || (st.hashed && st.hash != p.hash);
      if (!changed) continue;
      if (p.hashed) removed.block_hashes.push_back(p.hash);
      if (st.hashed) stored.push_back(b);
      p = {st.hashed, st.hash};
    }
    const std::optional<int32_t> group_idx = hybrid ? std::optional<int32_t>(static_cast<int32_t>(g)) : std::nullopt;
    if (!removed.block_hashes.empty()) {
      removed.group_idx = group_idx;
      out.push_back(std::move(removed));
    }
    // Parents first: a block's depth among this step's new blocks orders the stores, so a
    // consumer building a prefix tree always knows the parent it is told about.
    std::unordered_map<BlockId, int> depth;
    for (BlockId b : stored) depth[b] = 0;
    auto depth_of = [&](BlockId b) {
      int d = 0;
      for (BlockId q = pool.state(b).parent; q != kNoBlock && depth.count(q) && d < static_cast<int>(stored.size());
           q = pool.state(q).parent)
        ++d;
      return d;
    };
    for (BlockId b : stored) depth[b] = depth_of(b);
    std::stable_sort(stored.begin(), stored.end(), [&](BlockId a, BlockId b) { return depth[a] < depth[b]; });
    for (BlockId b : stored) {
      const BlockState& st = pool.state(b);
      KvBlockStored s;
      s.block_hashes = {st.hash};
      if (st.parent != kNoBlock && pool.state(st.parent).hashed) s.parent_block_hash = pool.state(st.parent).hash;
      s.token_ids.assign(st.tokens.begin(), st.tokens.end());
      s.block_size = m.config().block_size;
      if (hybrid) {
        s.group_idx = static_cast<int32_t>(g);
        const int32_t w = m.config().sliding_window;
        s.kv_cache_spec_kind = w > 0 ? "sliding_window" : "full_attention";
        if (w > 0) s.kv_cache_spec_sliding_window = w;
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace kvscope::serve
