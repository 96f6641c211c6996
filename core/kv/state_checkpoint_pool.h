#pragma once
// Recurrent-state checkpoints for prefix caching on hybrid models. A KV block can be shared by
// any sequence with the same prefix, but a recurrent layer's state after token n folds in every
// token before it and cannot be rebuilt from blocks: a prefix hit needs a copy of the state as
// it was at the hit's end. The pool keeps such copies (checkpoints) at block boundaries, each
// keyed by its prefix's block-hash chain (kv/block_hash.h) and holding a state slot of the
// backend's (slot ids first_slot .. first_slot + capacity - 1, beside the running sequences').
// - Keys use the KV cache's own hash salt, so a checkpoint's key is the hash of the KV block its
//   prefix ends on: the window marks that block in the prefix tree.
// - A checkpoint is reserved when the step that computes its last token is planned and becomes
//   findable only after that step ran (commit), so no sequence restores a state not yet written.
// - Full: a ready checkpoint gives its slot up (an eviction), the least recently used of those
//   not known to be shared first. Shared ones (a branch point, where the KV cache proved another
//   prompt has the same prefix, or any checkpoint once restored) go only to another shared one,
//   or to an unshared save while they hold more than three quarters of the pool: without that, a
//   small pool let each request's own saves evict the shared system prompt's checkpoint before
//   its sibling came (measured: TTFT 0.90x of no checkpoints in 2 MiB, docs/performance.md).
//   Pending ones are never taken, so two saves in one step never share a slot.
// - Lookups compare the prefix's tokens exactly: a 64-bit hash collision costs a miss, never a
//   wrong state.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_types.h"

namespace kvscope {

// Which block boundaries a sequence checkpoints (the trade-off: checkpoint memory against how
// much of a hit survives). Off: none, and then a hybrid model gets no prefix-cache hits.
struct CheckpointPolicy {
  enum class Kind : uint8_t { Off, EveryBlocks, PromptEnd };
  Kind kind = Kind::EveryBlocks;
  int32_t every_blocks = 8;  // EveryBlocks: boundaries at multiples of this many blocks
};

std::string checkpoint_policy_name(const CheckpointPolicy& p);  // "off", "prompt-end", "every:8"
// Parses the names above ("every-block" = "every:1"); false, with `why`, on anything else.
bool parse_checkpoint_policy(const std::string& s, CheckpointPolicy& out, std::string& why);

struct CheckpointCounters {
  uint64_t saved = 0;     // checkpoints written
  uint64_t restored = 0;  // prefix hits served from a checkpoint
  uint64_t evicted = 0;   // ready checkpoints whose slot was reused
};

class StateCheckpointPool {
 public:
  StateCheckpointPool(int32_t first_slot, int32_t capacity, int32_t block_size, uint64_t hash_salt = 0);

  int32_t capacity() const { return static_cast<int32_t>(entries_.size()); }
  int32_t used() const { return static_cast<int32_t>(by_key_.size()); }
  int32_t block_size() const { return block_size_; }
  const CheckpointCounters& counters() const { return counters_; }

  // The longest prefix of tokens, at most max_len tokens, with a ready checkpoint: its length
  // (a multiple of the block size; 0: none) and slot (-1: none). Changes nothing.
  struct Hit {
    int32_t len = 0;
    int32_t slot = -1;
  };
  Hit longest(std::span<const TokenId> tokens, int32_t max_len) const;
  // A restore of this hit is queued: the checkpoint becomes the most recently used and shared (counted).
  void mark_restored(int32_t slot);
  // A slot for the checkpoint of prefix (a whole number of blocks), written by seq's next step;
  // shared: a prefix known to be shared (a branch point). -1 when it is already kept (then
  // touched, and marked shared if so), or no slot may be taken (see above).
  int32_t reserve(std::span<const TokenId> prefix, SeqId seq, bool shared = false);
  void commit();                 // the step ran: its pending checkpoints become findable
  void drop_pending(SeqId seq);  // seq left before its step ran: its reservations free again
  // The pending and ready checkpoints.
  struct Held {
    BlockHash key = 0;   // the prefix's block-hash chain: its last KV block's hash
    int32_t tokens = 0;  // prefix length
    bool pending = false;
  };
  std::vector<Held> held() const;
  void validate() const;

 private:
  struct Entry {
    bool held = false, pending = false, shared = false;
    SeqId writer = -1;
    BlockHash key = 0;
    std::vector<TokenId> prefix;
    uint64_t last_used = 0;
  };
  BlockHash key_of(std::span<const TokenId> prefix) const;
  int32_t find(BlockHash key, std::span<const TokenId> prefix) const;  // entry index, -1: none
  int32_t victim(bool for_shared) const;                               // entry to (re)use, -1: none
  void release(int32_t e);

  int32_t first_slot_, block_size_;
  uint64_t salt_;
  std::vector<Entry> entries_;
  std::unordered_multimap<BlockHash, int32_t> by_key_;  // key -> entry (held only)
  uint64_t tick_ = 0;
  CheckpointCounters counters_;
};

}  // namespace kvscope
