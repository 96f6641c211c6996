#pragma once
// One sequence's block table, as KvCacheManager keeps it and TokenHoles (token eviction's
// holes and compaction) edits it.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/kv_types.h"

namespace kvscope {

struct SeqCacheStats {
  int32_t cached_prompt_tokens = 0;  // prompt tokens found in the prefix cache at admission
};

struct SeqTable {
  std::vector<BlockId> blocks;
  int32_t len = 0;             // cache rows (holes included)
  int32_t shift = 0;           // rows removed by compaction: position = row + shift
  bool token_evicted = false;  // token eviction touched it: nothing more enters the prefix cache
  SeqCacheStats stats;
};

using SeqTables = std::unordered_map<SeqId, SeqTable>;

}  // namespace kvscope
