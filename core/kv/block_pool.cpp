#include "kv/block_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace kvscope {

namespace {
[[noreturn]] void broken(const std::string& what) { throw std::logic_error("BlockPool invariant: " + what); }
std::string blk(BlockId b) { return "block " + std::to_string(b); }
}  // namespace

BlockPool::BlockPool(int32_t num_blocks) : BlockPool(num_blocks, 0) {}

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size) : block_size_(block_size) {
  if (num_blocks < 0) throw std::invalid_argument("BlockPool: negative block count");
  if (block_size < 0) throw std::invalid_argument("BlockPool: negative block size");
  blocks_.resize(num_blocks);
  lru_pos_.resize(num_blocks);
  children_.resize(num_blocks);
  is_changed_.resize(num_blocks, 0);
  // Every block starts free; ids in order so a fresh pool hands out 0, 1, 2...
  for (BlockId b = 0; b < num_blocks; ++b) lru_pos_[b] = lru_.insert(lru_.end(), b);
}

int32_t BlockPool::num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
int32_t BlockPool::num_free() const { return static_cast<int32_t>(lru_.size()); }
int32_t BlockPool::num_evictable() const { return evictable_; }
int32_t BlockPool::num_used() const { return used_; }

void BlockPool::check_id(BlockId b) const {
  KV_CHECK(b >= 0 && b < num_blocks(),
           "block id " + std::to_string(b) + " out of range [0, " + std::to_string(num_blocks()) + ")");
}

const BlockState& BlockPool::state(BlockId b) const {
  check_id(b);
  return blocks_[b];
}

std::optional<BlockId> BlockPool::allocate() {
  if (lru_.empty()) return std::nullopt;
  const BlockId b = lru_.front();  // least recently freed: the coldest cached content goes first
  lru_.pop_front();
  BlockState& st = blocks_[b];
  KV_CHECK(st.ref_count == 0, blk(b) + " in the free queue is referenced");
  if (st.hashed) {
    ++counters_.evictions;
    drop_hash(b);
  }
  st.ref_count = 1;
  st.filled = 0;
  st.holes = 0;
  mark_changed(b);
  ++used_;
  ++counters_.allocations;
  return b;
}

void BlockPool::ref(BlockId b) {
  check_id(b);
  BlockState& st = blocks_[b];
  if (st.ref_count == 0) {
    // Only cached content can be revived; a truly free block must come from allocate().
    KV_CHECK(st.hashed, "ref() of " + blk(b) + " that is free and not cached");
    lru_.erase(lru_pos_[b]);
    --evictable_;
    ++used_;
  }
  ++st.ref_count;
  mark_changed(b);
}

void BlockPool::unref(BlockId b) {
  check_id(b);
  BlockState& st = blocks_[b];
  KV_CHECK(st.ref_count > 0, "unref() of unreferenced " + blk(b));
  mark_changed(b);
  if (--st.ref_count > 0) return;
  --used_;
  ++counters_.frees;
  lru_pos_[b] = lru_.insert(lru_.end(), b);  // most recently freed: evicted last
  if (st.hashed)
    ++evictable_;
  else if (track_releases_)
    released_.push_back(b);
}

void BlockPool::set_filled(BlockId b, int32_t filled) {
  check_id(b);
  BlockState& st = blocks_[b];
  KV_CHECK(st.ref_count > 0, "set_filled() on unreferenced " + blk(b));
  KV_CHECK(filled >= 0 && (block_size_ == 0 || filled <= block_size_), "fill out of range for " + blk(b));
  KV_CHECK(!st.hashed || filled == st.filled, "set_filled() would change cached " + blk(b));
  if (filled != st.filled) mark_changed(b);
  st.filled = filled;
}

void BlockPool::set_holes(BlockId b, int32_t holes) {
  check_id(b);
  BlockState& st = blocks_[b];
  KV_CHECK(st.ref_count > 0, "set_holes() on unreferenced " + blk(b));
  KV_CHECK(holes >= 0 && holes <= st.filled, "holes out of range for " + blk(b));
  if (holes != st.holes) mark_changed(b);
  st.holes = holes;
}

void BlockPool::unhash(BlockId b) {
  check_id(b);
  KV_CHECK(blocks_[b].ref_count > 0, "unhash() on unreferenced " + blk(b));
  drop_hash(b);
}

void BlockPool::set_hash(BlockId b, BlockHash h, BlockId parent, std::span<const TokenId> tokens) {
  check_id(b);
  BlockState& st = blocks_[b];
  KV_CHECK(st.ref_count > 0, "set_hash() on unreferenced " + blk(b));
  KV_CHECK(!st.hashed, "set_hash() on already cached " + blk(b));
  KV_CHECK(parent != b, "set_hash(): " + blk(b) + " is its own parent");
  KV_CHECK(block_size_ == 0 || static_cast<int32_t>(tokens.size()) == block_size_,
           "set_hash(): only full blocks are cached");
  if (parent != kNoBlock) {
    check_id(parent);
    KV_CHECK(blocks_[parent].hashed, "set_hash(): parent of " + blk(b) + " is not cached (chain invariant)");
    children_[parent].push_back(b);
  }
  st.hashed = true;
  st.hash = h;
  st.parent = parent;
  st.tokens.assign(tokens.begin(), tokens.end());
  st.filled = static_cast<int32_t>(tokens.size());
  cached_.emplace(h, b);
  mark_changed(b);
}

std::optional<BlockId> BlockPool::lookup(BlockHash h, BlockId parent, std::span<const TokenId> tokens) const {
  auto [it, end] = cached_.equal_range(h);
  for (; it != end; ++it) {
    const BlockState& st = blocks_[it->second];
    // The hash only narrows the search; identity is parent + exact tokens (collision-proof).
    if (same_prefix(st.parent, parent) && std::ranges::equal(st.tokens, tokens)) return it->second;
  }
  return std::nullopt;
}

bool BlockPool::same_prefix(BlockId a, BlockId b) const {
  while (a != b) {
    if (a == kNoBlock || b == kNoBlock) return false;
    const BlockState &x = blocks_[a], &y = blocks_[b];
    if (!x.hashed || !y.hashed || x.hash != y.hash || !std::ranges::equal(x.tokens, y.tokens)) return false;
    a = x.parent;
    b = y.parent;
  }
  return true;
}

void BlockPool::unlink_child(BlockId parent, BlockId child) {
  auto& kids = children_[parent];
  auto it = std::find(kids.begin(), kids.end(), child);
  KV_CHECK(it != kids.end(), blk(child) + " missing from its parent's child list");
  *it = kids.back();
  kids.pop_back();
}

// Un-hash b and, transitively, every cached descendant (explicit stack: chains can be long).
void BlockPool::drop_hash(BlockId root) {
  std::vector<BlockId> todo{root};
  while (!todo.empty()) {
    const BlockId b = todo.back();
    todo.pop_back();
    BlockState& st = blocks_[b];
    if (!st.hashed) continue;
    auto [it, end] = cached_.equal_range(st.hash);
    while (it != end && it->second != b) ++it;
    KV_CHECK(it != end, "cached " + blk(b) + " missing from the hash map");
    cached_.erase(it);
    if (st.parent != kNoBlock && b == root) unlink_child(st.parent, b);  // descendants: parent is dropping too
    for (BlockId c : children_[b]) todo.push_back(c);
    children_[b].clear();
    if (b != root) ++counters_.orphaned;
    dropped_.push_back({st.hash, b != root});
    if (st.ref_count == 0) --evictable_;
    st.hashed = false;
    st.hash = 0;
    st.parent = kNoBlock;
    st.tokens.clear();
    mark_changed(b);
  }
}

void BlockPool::mark_changed(BlockId b) {
  if (is_changed_[b]) return;
  is_changed_[b] = 1;
  changed_.push_back(b);
}

std::vector<BlockId> BlockPool::take_changed() {
  for (BlockId b : changed_) is_changed_[b] = 0;
  return std::exchange(changed_, {});
}

void BlockPool::validate() const {
  const int32_t n = num_blocks();
  if (static_cast<int32_t>(lru_pos_.size()) != n || static_cast<int32_t>(children_.size()) != n)
    broken("per-block side tables have the wrong size");
  std::vector<int> in_lru(n, 0);
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    const BlockId b = *it;
    if (b < 0 || b >= n) broken("free queue holds out-of-range " + blk(b));
    if (++in_lru[b] > 1) broken(blk(b) + " appears twice in the free queue");
    if (lru_pos_[b] != it) broken("stale free-queue position for " + blk(b));
  }
  int32_t used = 0, evictable = 0, hashed = 0;
  for (BlockId b = 0; b < n; ++b) {
    const BlockState& st = blocks_[b];
    if (st.ref_count < 0) broken(blk(b) + " has a negative ref count");
    if ((st.ref_count == 0) != (in_lru[b] == 1)) broken(blk(b) + ": in the free queue iff ref count is 0");
    if (st.ref_count > 0) ++used;
    if (block_size_ > 0 && st.filled > block_size_) broken(blk(b) + " filled beyond block size");
    if (!st.hashed) {
      if (!st.tokens.empty() || st.parent != kNoBlock || !children_[b].empty())
        broken("uncached " + blk(b) + " keeps cache metadata");
      continue;
    }
    ++hashed;
    if (st.ref_count == 0) ++evictable;
    if (st.filled != static_cast<int32_t>(st.tokens.size())) broken("cached " + blk(b) + " is not full");
    if (st.parent != kNoBlock) {
      if (st.parent < 0 || st.parent >= n || !blocks_[st.parent].hashed)
        broken("cached " + blk(b) + " has an uncached parent (chain invariant)");
      const auto& kids = children_[st.parent];
      if (std::count(kids.begin(), kids.end(), b) != 1) broken(blk(b) + " not listed once under its parent");
    }
    for (BlockId c : children_[b])
      if (c < 0 || c >= n || !blocks_[c].hashed || blocks_[c].parent != b)
        broken("child list of " + blk(b) + " names a block that is not its cached child");
    auto [it, end] = cached_.equal_range(st.hash);
    if (std::count_if(it, end, [b](const auto& kv) { return kv.second == b; }) != 1)
      broken("cached " + blk(b) + " not in the hash map exactly once");
  }
  if (used != used_) broken("used count " + std::to_string(used_) + " != " + std::to_string(used));
  if (evictable != evictable_) broken("evictable count drifted");
  if (static_cast<int32_t>(cached_.size()) != hashed) broken("hash map holds entries for uncached blocks");
  if (num_free() + used_ != n) broken("free + used != total");
}

}  // namespace kvscope
