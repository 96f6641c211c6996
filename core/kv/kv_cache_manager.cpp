#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <stdexcept>

#include "kv/block_hash.h"

namespace kvscope {

namespace {
int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

const KvCacheConfig& checked(const KvCacheConfig& cfg) {
  if (cfg.block_size <= 0) throw std::invalid_argument("KvCacheConfig: block_size must be > 0");
  if (cfg.num_blocks < 0) throw std::invalid_argument("KvCacheConfig: num_blocks must be >= 0");
  if (cfg.sliding_window < 0 || cfg.sink_tokens < 0)
    throw std::invalid_argument("KvCacheConfig: sliding_window and sink_tokens must be >= 0");
  return cfg;
}

[[noreturn]] void broken(SeqId seq, const std::string& what) {
  throw std::logic_error("KvCacheManager invariant (seq " + std::to_string(seq) + "): " + what);
}
}  // namespace

KvCacheManager::KvCacheManager(const KvCacheConfig& cfg)
    : cfg_(checked(cfg)),
      pool_(cfg.num_blocks, cfg.block_size),
      register_lag_(cfg.register_lag, cfg.report_released),
      token_holes_({cfg.block_size, cfg.num_blocks, cfg.token_eviction, cfg.hole_layers}, pool_, seqs_, evictions_) {
  register_lag_.attach(pool_);
}

const SeqTable& KvCacheManager::table_of(SeqId seq) const {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "unknown sequence " + std::to_string(seq));
  return it->second;
}

bool KvCacheManager::has_seq(SeqId seq) const { return seqs_.contains(seq); }
int32_t KvCacheManager::seq_len(SeqId seq) const { return table_of(seq).len + table_of(seq).shift; }
std::span<const BlockId> KvCacheManager::block_table(SeqId seq) const { return table_of(seq).blocks; }
const SeqCacheStats& KvCacheManager::stats(SeqId seq) const { return table_of(seq).stats; }

int32_t KvCacheManager::blocks_held(SeqId seq) const {
  const auto& blocks = table_of(seq).blocks;
  return static_cast<int32_t>(std::count_if(blocks.begin(), blocks.end(), [](BlockId b) { return b != kNoBlock; }));
}

std::vector<SeqId> KvCacheManager::sequences() const {
  std::vector<SeqId> ids;
  ids.reserve(seqs_.size());
  for (const auto& [id, t] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());  // stable order for snapshots and tests
  return ids;
}

// The next position is `len`; it reads [len - W + 1, len]. Sink blocks hold a position < S.
bool KvCacheManager::block_outside_window(int32_t bi, int32_t len) const {
  const int32_t w = cfg_.sliding_window, bs = cfg_.block_size;
  if (w == 0 || bi * bs < cfg_.sink_tokens) return false;
  return (bi + 1) * bs - 1 < len - w + 1;
}

std::vector<BlockId> KvCacheManager::cached_prefix_blocks(std::span<const TokenId> prompt) const {
  std::vector<BlockId> hits;
  if (!cfg_.prefix_caching || prompt.empty()) return hits;
  const int32_t bs = cfg_.block_size;
  // The block holding the last prompt token is never a hit: its forward produces the logits.
  const int32_t max_blocks = (static_cast<int32_t>(prompt.size()) - 1) / bs;
  BlockHash h = kRootBlockHash;
  BlockId parent = kNoBlock;
  for (int32_t bi = 0; bi < max_blocks; ++bi) {
    const auto toks = prompt.subspan(static_cast<size_t>(bi) * bs, bs);
    h = block_hash(h, toks, cfg_.hash_salt);
    const auto b = pool_.lookup(h, parent, toks);
    if (!b) break;  // first miss ends the prefix: later blocks' K/V depend on this one
    hits.push_back(*b);
    parent = *b;
  }
  const int32_t cached = static_cast<int32_t>(hits.size()) * bs;
  for (int32_t bi = 0; bi < static_cast<int32_t>(hits.size()); ++bi)
    if (block_outside_window(bi, cached)) hits[bi] = kNoBlock;
  return hits;
}

int32_t KvCacheManager::peek_cached_prefix(std::span<const TokenId> prompt) const {
  return static_cast<int32_t>(cached_prefix_blocks(prompt).size()) * cfg_.block_size;
}

int32_t KvCacheManager::attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) {
  KV_CHECK(!has_seq(seq), "attach_cached_prefix() on existing sequence " + std::to_string(seq));
  SeqTable t;
  t.blocks = cached_prefix_blocks(prompt);
  for (BlockId b : t.blocks)
    if (b != kNoBlock) pool_.ref(b);  // revives an evictable block: it leaves the LRU queue
  t.len = static_cast<int32_t>(t.blocks.size()) * cfg_.block_size;
  t.stats.cached_prompt_tokens = t.len;
  if (cfg_.prefix_caching) {
    queries_tokens_ += prompt.size();
    hits_tokens_ += static_cast<uint64_t>(t.len);
  }
  seqs_.emplace(seq, std::move(t));
  return seqs_.at(seq).len;
}

bool KvCacheManager::can_admit(std::span<const TokenId> prompt, int32_t n_tokens, int32_t) const {
  const auto hits = cached_prefix_blocks(prompt);
  // A hit on an evictable block takes it out of the free queue just like a fresh allocation.
  const auto revived = std::count_if(hits.begin(), hits.end(),
                                     [&](BlockId b) { return b != kNoBlock && pool_.state(b).ref_count == 0; });
  const int32_t fresh = std::max(0, ceil_div(n_tokens, cfg_.block_size) - static_cast<int32_t>(hits.size()));
  return revived + fresh <= pool_.num_free();
}

std::string KvCacheManager::never_fits(int32_t n_tokens, int32_t max_chunk) const {
  const int32_t bs = cfg_.block_size;
  int32_t peak = ceil_div(n_tokens, bs);
  if (cfg_.sliding_window > 0) {
    // While a chunk of c tokens runs, the sequence holds its sinks plus every block overlapping
    // the c positions and the W - 1 before them.
    const int32_t c = std::clamp(max_chunk, 1, std::max(1, n_tokens));
    peak = std::min(peak, ceil_div(cfg_.sink_tokens, bs) + ceil_div(cfg_.sliding_window - 1 + c, bs) + 1);
  }
  if (peak <= pool_.num_blocks()) return {};
  return "needs " + std::to_string(peak) + " KV blocks of " + std::to_string(bs) + " tokens for " +
         std::to_string(n_tokens) + " tokens, but the whole pool has " + std::to_string(pool_.num_blocks());
}

int32_t KvCacheManager::blocks_needed(SeqId seq, int32_t n_new) const {
  if (n_new <= 0) return 0;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return ceil_div(n_new, cfg_.block_size);
  const SeqTable& t = it->second;
  int32_t need = ceil_div(t.len + n_new, cfg_.block_size) - static_cast<int32_t>(t.blocks.size());
  if (t.len % cfg_.block_size != 0 && pool_.state(t.blocks.back()).ref_count > 1) ++need;  // copy-on-write
  return need;
}

KvCacheManager::AllocationPlan KvCacheManager::plan_allocation(const SeqTable& t, int32_t n_new) const {
  const int32_t bs = cfg_.block_size, len = t.len;
  AllocationPlan p;
  // Window drops form the range [sink blocks, first block still read); everything below its
  // present tail was dropped before.
  if (cfg_.sliding_window > 0) {
    const int32_t limit =
        std::min<int32_t>(std::max(0, len - cfg_.sliding_window + 1) / bs, static_cast<int32_t>(t.blocks.size()));
    for (int32_t bi = limit - 1; bi >= 0 && block_outside_window(bi, len) && t.blocks[bi] != kNoBlock; --bi) {
      p.drops.push_back(bi);
      if (pool_.state(t.blocks[bi]).ref_count == 1) ++p.freed_by_drops;
    }
  }
  p.cow = len % bs != 0 && pool_.state(t.blocks.back()).ref_count > 1;
  p.need = ceil_div(len + n_new, bs) - static_cast<int32_t>(t.blocks.size()) + (p.cow ? 1 : 0);
  return p;
}

bool KvCacheManager::can_allocate(SeqId seq, int32_t n_new) const {
  if (n_new <= 0) return true;
  auto it = seqs_.find(seq);
  const AllocationPlan p = plan_allocation(it == seqs_.end() ? SeqTable{} : it->second, n_new);
  return p.need <= pool_.num_free() + p.freed_by_drops;
}

bool KvCacheManager::allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) {
  KV_CHECK(n_new >= 0, "allocate_slots() with negative n_new");
  const int32_t bs = cfg_.block_size;
  auto it = seqs_.find(seq);
  const bool created = it == seqs_.end();
  if (created) it = seqs_.emplace(seq, SeqTable{}).first;
  SeqTable& t = it->second;
  const int32_t len = t.len, new_len = len + n_new;
  KV_CHECK(static_cast<int64_t>(tokens.size()) >= new_len, "allocate_slots(): tokens shorter than len + n_new");
  if (n_new == 0) return true;

  // Plan first so that a failure changes nothing.
  const AllocationPlan plan = plan_allocation(t, n_new);
  const std::vector<int32_t>& drops = plan.drops;
  const bool cow = plan.cow;
  if (plan.need > pool_.num_free() + plan.freed_by_drops) {
    if (created) seqs_.erase(it);
    return false;
  }

  for (int32_t bi : drops) {
    pool_.unref(t.blocks[bi]);  // keeps its hash: cached-evictable, a later prompt may revive it
    t.blocks[bi] = kNoBlock;
  }
  if (cow) {
    // The shared partial block stays with the other holders; this sequence writes into a copy.
    const BlockId src = t.blocks.back();
    const auto dst = pool_.allocate();
    KV_CHECK(dst.has_value(), "pool ran dry after the plan said it would not");
    token_holes_.fresh_block(*dst);
    pool_.set_filled(*dst, len % bs);
    pending_copies_.push_back(BlockCopy{src, *dst, len % bs});
    t.blocks.back() = *dst;
    pool_.unref(src);
  }
  while (static_cast<int32_t>(t.blocks.size()) < ceil_div(new_len, bs)) {
    const auto b = pool_.allocate();
    KV_CHECK(b.has_value(), "pool ran dry after the plan said it would not");
    token_holes_.fresh_block(*b);
    t.blocks.push_back(*b);
  }
  evictions_.note(pool_, seq);
  for (int32_t bi = len / bs; bi < ceil_div(new_len, bs); ++bi)
    pool_.set_filled(t.blocks[bi], std::min(bs, new_len - bi * bs));
  token_holes_.note_positions(t, len, new_len);
  // Full blocks are registered now, before their forward runs (as vLLM v1): the engine writes
  // every chunk's K/V of a layer before any attention of that layer reads the cache.
  // With a register lag (KIVI's residual) a block waits until that many tokens follow it.
  if (cfg_.prefix_caching && !t.token_evicted) {
    const RegisterLag::Range r = register_lag_.registrable(len, new_len, bs);
    register_full_blocks(t.blocks, tokens, r.first, r.end);
  }
  t.len = new_len;
  return true;
}

void KvCacheManager::register_full_blocks(std::vector<BlockId>& table, std::span<const TokenId> tokens, int32_t first,
                                          int32_t end) {
  const int32_t bs = cfg_.block_size;
  for (int32_t bi = first; bi < end; ++bi) {
    // Only a lagged range reaches back over prefix-cache hits (hashed) or dropped blocks.
    if (table[bi] == kNoBlock || pool_.state(table[bi]).hashed) continue;
    const auto toks = tokens.subspan(static_cast<size_t>(bi) * bs, bs);
    BlockId parent = kNoBlock;
    BlockHash parent_hash = kRootBlockHash;
    if (bi > 0) {
      parent = table[bi - 1];
      // A dropped or un-hashed parent breaks the chain: nothing after it can be proven exact.
      if (parent == kNoBlock || !pool_.state(parent).hashed) return;
      const auto& ps = pool_.state(parent);
      KV_CHECK(std::ranges::equal(ps.tokens, tokens.subspan(static_cast<size_t>(bi - 1) * bs, bs)),
               "allocate_slots(): tokens disagree with the cached block they extend");
      parent_hash = ps.hash;
    }
    pool_.set_hash(table[bi], block_hash(parent_hash, toks, cfg_.hash_salt), parent, toks);
  }
}

int64_t KvCacheManager::slot(SeqId seq, int32_t pos) const {
  const SeqTable& t = table_of(seq);
  const int32_t row = pos - t.shift;  // == pos unless token eviction compacted the table
  KV_CHECK(row >= 0 && row < t.len, "slot(): position " + std::to_string(pos) + " has no slot");
  const BlockId b = t.blocks[row / cfg_.block_size];
  KV_CHECK(b != kNoBlock,
           "slot(): position " + std::to_string(pos) + " was dropped (outside the window or token-evicted)");
  return static_cast<int64_t>(b) * cfg_.block_size + row % cfg_.block_size;
}

void KvCacheManager::fork(SeqId parent, SeqId child) {
  KV_CHECK(!has_seq(child), "fork(): child " + std::to_string(child) + " already exists");
  SeqTable t;
  t.blocks = table_of(parent).blocks;
  t.len = table_of(parent).len;
  t.shift = table_of(parent).shift;
  t.token_evicted = table_of(parent).token_evicted;
  for (BlockId b : t.blocks)
    if (b != kNoBlock) pool_.ref(b);
  seqs_.emplace(child, std::move(t));
}

void KvCacheManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  // Tail first (as vLLM): a sequence's last blocks are the least likely to be shared, so they
  // reach the LRU head first and are evicted before its prefix.
  const auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b)
    if (*b != kNoBlock) pool_.unref(*b);
  seqs_.erase(it);
}

void KvCacheManager::take_evictions(std::vector<EvictionRecord>& out) { evictions_.take(out); }

std::vector<BlockRelease> KvCacheManager::take_released_blocks() { return register_lag_.take_released(pool_); }

std::vector<BlockCopy> KvCacheManager::take_pending_copies() {
  std::vector<BlockCopy> out;
  out.swap(pending_copies_);
  return out;
}

void KvCacheManager::validate() const {
  pool_.validate();
  const int32_t bs = cfg_.block_size, n = pool_.num_blocks();
  std::vector<int32_t> refs(n, 0);
  for (const auto& [id, t] : seqs_) {
    if (static_cast<int32_t>(t.blocks.size()) != ceil_div(t.len, bs)) broken(id, "table size != ceil(len / bs)");
    for (int32_t bi = 0; bi < static_cast<int32_t>(t.blocks.size()); ++bi) {
      const BlockId b = t.blocks[bi];
      if (b == kNoBlock) {
        if (!t.token_evicted && !block_outside_window(bi, t.len))
          broken(id, "kNoBlock at table index " + std::to_string(bi) + " inside the window or sinks");
        continue;
      }
      if (b < 0 || b >= n) broken(id, "table holds out-of-range block " + std::to_string(b));
      ++refs[b];
      if (pool_.state(b).filled != std::min(bs, t.len - bi * bs))
        broken(id, "block " + std::to_string(b) + " fill disagrees with the sequence length");
    }
    token_holes_.validate(id, t);
  }
  for (BlockId b = 0; b < n; ++b) {
    const BlockState& st = pool_.state(b);
    if (st.ref_count != refs[b])
      throw std::logic_error("KvCacheManager invariant: block " + std::to_string(b) + " ref count " +
                             std::to_string(st.ref_count) + " != " + std::to_string(refs[b]) + " table references");
    if (!st.hashed) continue;
    if (!cfg_.prefix_caching) throw std::logic_error("KvCacheManager invariant: hashed block with prefix caching off");
    const BlockHash ph = st.parent == kNoBlock ? kRootBlockHash : pool_.state(st.parent).hash;
    if (st.hash != block_hash(ph, st.tokens, cfg_.hash_salt))
      throw std::logic_error("KvCacheManager invariant: block " + std::to_string(b) +
                             " hash is not hash(parent, tokens)");
    if (!pool_.lookup(st.hash, st.parent, st.tokens))
      throw std::logic_error("KvCacheManager invariant: cached block " + std::to_string(b) + " not findable");
  }
  if (pool_.num_free() + pool_.num_used() != n)  // num_free counts truly free + evictable
    throw std::logic_error("KvCacheManager invariant: free + evictable + used != total");
  for (const BlockCopy& c : pending_copies_)
    if (c.src < 0 || c.src >= n || c.dst < 0 || c.dst >= n || c.n_slots <= 0 || c.n_slots >= bs)
      throw std::logic_error("KvCacheManager invariant: malformed pending block copy");
}

}  // namespace kvscope
