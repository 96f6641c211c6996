#include "attach/cache_view.h"

#include <algorithm>
#include <tuple>

namespace kvscope::attach {

size_t BlockKeyHash::operator()(const BlockKey& k) const noexcept {
  size_t h = std::hash<BlockHash>()(k.hash);
  h ^= std::hash<int32_t>()(k.group_idx) * 0x9e3779b97f4a7c15ull;
  if (k.medium) h ^= std::hash<std::string>()(*k.medium) << 1;
  return h;
}

void CacheView::apply(const kv_events::KvEventBatch& batch) {
  for (const kv_events::KvEvent& ev : batch.events) {
    if (const auto* s = std::get_if<kv_events::KvBlockStored>(&ev)) {
      store(*s, batch.ts);
    } else if (const auto* r = std::get_if<kv_events::KvBlockRemoved>(&ev)) {
      remove(*r);
    } else {
      blocks_.clear();
      held_ = 0;
      ++counters_.clears;
    }
  }
}

void CacheView::clear() {
  blocks_.clear();
  held_ = 0;
}

bool CacheView::parent_cached(int32_t group, const BlockHash& parent) const {
  // The parent may live in another tier (a CPU-offloaded child of a GPU block): any medium.
  for (const auto& [key, b] : blocks_)
    if (key.group_idx == group && key.hash == parent) return true;
  return false;
}

void CacheView::store(const kv_events::KvBlockStored& s, double ts) {
  const int32_t group = s.group_idx.value_or(0);
  const size_t n = s.block_hashes.size();
  const size_t per = s.block_size > 0 ? static_cast<size_t>(s.block_size) : 0;
  if (n && s.token_ids.size() != per * n) ++counters_.token_count_mismatch;
  if (s.parent_block_hash) {
    // Looking the parent up in the same medium first keeps the common case O(1).
    const BlockKey same{group, s.medium, *s.parent_block_hash};
    if (!blocks_.count(same) && !parent_cached(group, *s.parent_block_hash)) ++counters_.missing_parent;
  }
  std::optional<BlockHash> parent = s.parent_block_hash;
  for (size_t i = 0; i < n; ++i) {
    BlockKey key{group, s.medium, s.block_hashes[i]};
    auto [it, fresh] = blocks_.try_emplace(key);
    CachedBlock& b = it->second;
    if (fresh) {
      b.key = std::move(key);
      b.first_seen = ts;
      b.parent = parent;
      // The event's tokens, block_size per hash; with a count that does not fit, what is there.
      const size_t from = std::min(s.token_ids.size(), i * per), to = std::min(s.token_ids.size(), from + per);
      b.token_ids.assign(s.token_ids.begin() + static_cast<long>(from), s.token_ids.begin() + static_cast<long>(to));
    } else {
      ++b.copies;
    }
    b.last_seen = ts;
    ++held_;
    parent = s.block_hashes[i];
    ++counters_.stored;
  }
}

void CacheView::remove(const kv_events::KvBlockRemoved& r) {
  const int32_t group = r.group_idx.value_or(0);
  for (const BlockHash& h : r.block_hashes) {
    ++counters_.removed;
    auto it = blocks_.find(BlockKey{group, r.medium, h});
    if (it == blocks_.end()) {
      ++counters_.removed_unknown;
      continue;
    }
    --held_;
    if (--it->second.copies == 0) blocks_.erase(it);
  }
}

std::vector<const CachedBlock*> CacheView::sorted() const {
  std::vector<const CachedBlock*> out;
  out.reserve(blocks_.size());
  for (const auto& [k, b] : blocks_) out.push_back(&b);
  std::sort(out.begin(), out.end(), [](const CachedBlock* a, const CachedBlock* b) {
    return std::tie(a->key.group_idx, a->key.medium, a->first_seen, a->key.hash) <
           std::tie(b->key.group_idx, b->key.medium, b->first_seen, b->key.hash);
  });
  return out;
}

}  // namespace kvscope::attach
