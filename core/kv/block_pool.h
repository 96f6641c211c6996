#pragma once
// Bookkeeping for a fixed pool of physical KV blocks (no tensor memory here).
// A block is free (ref 0, no hash), in use (ref > 0), or cached-evictable (ref 0 with a hash:
// its K/V are still valid and a later prefix-cache hit can revive it). Free and evictable blocks
// share one LRU queue, as in vLLM: allocate() takes the least recently freed block and, if it was
// cached, drops its hash (an eviction).
// Chain invariant: a hashed block's parent is kNoBlock or a hashed block, and a hashed block's
// contents never change. Evicting a block therefore also un-hashes its cached descendants
// (counted as `orphaned`): their K/V were computed after the old parent contents, so a lookup
// through a reused parent id must never find them. With it, lookup(hash, parent, tokens) is exact
// by induction over the chain, whatever the hash function does.
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/kv_types.h"

namespace kvscope {

struct BlockState {
  int32_t ref_count = 0;
  int32_t filled = 0;   // slots written (0..block_size)
  int32_t holes = 0;    // of those, evicted by token eviction (never in a shared block)
  bool hashed = false;  // full block registered in the prefix cache
  BlockHash hash = 0;
  BlockId parent = kNoBlock;    // previous block of the hash chain (exact collision check)
  std::vector<TokenId> tokens;  // token ids of a hashed block (exact collision check)
};

struct BlockPoolCounters {
  uint64_t allocations = 0;
  uint64_t frees = 0;      // ref count reached 0
  uint64_t evictions = 0;  // a cached block's hash dropped to reuse the block
  uint64_t orphaned = 0;   // cached descendants un-hashed because an ancestor was evicted
};

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);
  BlockPool(int32_t num_blocks, int32_t block_size);  // block_size > 0 also bounds set_filled/set_hash
  int32_t num_blocks() const;
  int32_t num_free() const;       // allocatable now: truly free + cached-evictable
  int32_t num_evictable() const;  // ref 0 but still hashed
  int32_t num_used() const;       // ref > 0

  std::optional<BlockId> allocate();  // ref becomes 1; evicts the LRU cached block if needed
  void ref(BlockId b);                // another table holds b (revives an evictable block)
  void unref(BlockId b);              // ref 0: to the LRU tail (hashed blocks stay cached)
  void set_filled(BlockId b, int32_t filled);
  void set_holes(BlockId b, int32_t holes);  // token eviction: evicted slots among the filled ones
  // Take a held block out of the prefix cache (its cached descendants too): token eviction
  // punched holes in it, so its contents no longer match its hash.
  void unhash(BlockId b);
  // Register a full block in the prefix cache. tokens/parent are stored so a hash collision
  // can never return the wrong K/V (lookup compares them exactly).
  void set_hash(BlockId b, BlockHash h, BlockId parent, std::span<const TokenId> tokens);
  // The cached block holding tokens after parent. Its recorded parent may be another block
  // with the same contents (a sequence that recomputed cached blocks, e.g. after a hit cut
  // short, registers duplicates): then both chains are compared block by block to the root,
  // so one copy of a prefix never hides the continuations cached under the other.
  std::optional<BlockId> lookup(BlockHash h, BlockId parent, std::span<const TokenId> tokens) const;

  const BlockState& state(BlockId b) const;
  const BlockPoolCounters& counters() const { return counters_; }
  // Blocks whose ref count, hash or fill changed since the last call (each once, in no
  // particular order). Lets an observer derive a step's block events, and keep its own copy of
  // every block's state current, from the few blocks touched instead of the whole pool.
  std::vector<BlockId> take_changed();
  // Hashes dropped by allocate() since the last call (the evicted block's, then the orphaned
  // descendants'), so that the allocator can say whose allocation evicted them.
  struct DroppedHash {
    BlockHash hash;
    bool orphaned;
  };
  std::vector<DroppedHash> take_dropped() { return std::exchange(dropped_, {}); }
  // With tracking on (KIVI's residual needs it), the blocks whose last ref went while not in the
  // prefix cache since the last call: their contents are dead. Off: nothing is collected.
  void track_releases(bool on) { track_releases_ = on; }
  std::vector<BlockId> take_released() { return std::exchange(released_, {}); }
  void validate() const;  // throws std::logic_error naming the broken invariant

 private:
  void drop_hash(BlockId b);
  bool same_prefix(BlockId a, BlockId b) const;  // both kNoBlock, or cached with equal chains
  void check_id(BlockId b) const;
  void unlink_child(BlockId parent, BlockId child);
  void mark_changed(BlockId b);
  int32_t block_size_ = 0;                      // 0: unknown (no upper bound checks)
  int32_t evictable_ = 0;                       // ref 0 and hashed
  std::vector<std::vector<BlockId>> children_;  // hashed blocks whose parent is this block
  std::vector<BlockState> blocks_;
  std::list<BlockId> lru_;                              // ref-0 blocks, least recently freed first
  std::vector<std::list<BlockId>::iterator> lru_pos_;   // per block, valid when ref 0
  std::unordered_multimap<BlockHash, BlockId> cached_;  // hash -> block
  BlockPoolCounters counters_;
  int32_t used_ = 0;
  std::vector<BlockId> changed_;     // see take_changed()
  std::vector<uint8_t> is_changed_;  // per block: already in changed_
  bool track_releases_ = false;
  std::vector<BlockId> released_;     // see take_released()
  std::vector<DroppedHash> dropped_;  // see take_dropped()
};

}  // namespace kvscope
