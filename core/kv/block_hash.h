#pragma once
// Prefix-cache key of one full block: hash(parent hash, the block's token ids, salt).
// Chaining the parent hash makes equal token blocks at different prefixes different keys; the
// salt keeps caches of different KV dtypes or models apart. 64 bits only narrow the search:
// BlockPool::lookup compares parent id and tokens exactly, so a collision costs a miss, never
// wrong K/V.
#include <cstdint>
#include <span>

#include "kv/kv_types.h"

namespace kvscope {

constexpr BlockHash kRootBlockHash = 0x243f6a8885a308d3ull;  // "parent hash" of a sequence's first block

BlockHash block_hash(BlockHash parent_hash, std::span<const TokenId> tokens, uint64_t salt);

}  // namespace kvscope
