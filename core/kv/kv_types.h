#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kvscope {

using TokenId = int32_t;
using BlockId = int32_t;
using SeqId = int64_t;
using BlockHash = uint64_t;

constexpr BlockId kNoBlock = -1;  // a block-table entry whose block was dropped (outside the window)

// Copy-on-write work for the backend: copy slots [src*bs, src*bs + n_slots) to [dst*bs, ...),
// bs being the allocator's block size (1 for the contiguous baseline, whose "blocks" are slots).
// group: the KV layer group whose pool holds both blocks (0 unless the hybrid KV cache is on).
struct BlockCopy {
  BlockId src;
  BlockId dst;
  int32_t n_slots;
  int32_t group = 0;
};

// A block whose last reference went and that is not in the prefix cache: nobody reads its K/V
// again. A backend keeping per-block state beside the pool (KIVI's f16 residual) drops it.
struct BlockRelease {
  BlockId block;
  int32_t group = 0;
};

// Token eviction's compaction: copy one slot's K/V (every layer) from src to dst (physical slots
// block * block_size + offset). Applied in order: a later copy may overwrite an earlier source.
struct SlotCopy {
  int64_t src;
  int64_t dst;
};

// A hash that left the prefix cache because an allocation needed its block (or, orphaned, a
// block before it in the hash chain): who evicted what, for the request stories' miss reasons.
struct EvictionRecord {
  int32_t group = 0;
  BlockHash hash = 0;
  SeqId by = -1;          // the sequence whose allocation evicted it
  bool orphaned = false;  // un-hashed because an ancestor in its chain was evicted
};

// Bookkeeping bugs must never become silent wrong K/V, and the default build is Release
// (NDEBUG), so these checks stay on and throw instead of aborting: a test can catch them and
// the GUI can report them.
[[noreturn]] inline void kv_check_failed(const char* cond, const std::string& what, const char* file, int line) {
  throw std::logic_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " (" + cond + ")");
}

}  // namespace kvscope

#define KV_CHECK(cond, what)                                                    \
  do {                                                                          \
    if (!(cond)) ::kvscope::kv_check_failed(#cond, (what), __FILE__, __LINE__); \
  } while (0)
