#pragma once
// One request's KV story: what happened to it, step by step, told from the engine's own events
// (the scheduler's verdicts and the block events the recorder derives from the allocator), not
// guessed afterwards. Built by RequestStoryRecorder, kept by RequestStoryLog, told in plain
// sentences by request_story_text.h and exported by request_story_json.h.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat/reasoning_parser.h"
#include "kv/kv_types.h"
#include "types/seq_state.h"

namespace kvscope {

// Why a waiting request was not admitted in a step (the head of the queue's reason; everybody
// behind it is HeadOfLine: FCFS, nobody overtakes the head).
enum class WaitReason : uint8_t { PoolFull, MaxRunning, TokenBudget, AfterPreemption, HeadOfLine };
const char* wait_reason_name(WaitReason r);

// Why the first block after a prefix hit was not a hit.
enum class MissReason : uint8_t {
  None,  // the whole prompt that can ever hit did (every full block but the last token's)
  PrefixCachingOff,
  NeverCached,        // no request in the kept history computed these tokens
  Evicted,            // was cached, then evicted at `step` by request `other`'s allocation
  PromptDiffers,      // the closest earlier request differs at token `token_pos`
  NotYetFull,         // only `other_filled` of the block's tokens existed (a block is cached once full)
  LastPromptToken,    // the block holds the prompt's last token: always recomputed for its logits
  SaltDiffers,        // cached under another KV dtype or model (another engine), so it can never match
  WindowDropped,      // the sliding window dropped the block before it (the hash chain broke)
  NoStateCheckpoint,  // hybrid recurrent model: K/V cached further, but no state checkpoint there
};
const char* miss_reason_name(MissReason r);

struct PrefixMiss {
  MissReason reason = MissReason::None;
  int32_t block_index = -1;   // the first block of the prompt that missed
  int32_t group = 0;          // the KV group whose cache missed (hybrid KV cache: 1 = sliding layers)
  uint64_t step = 0;          // Evicted / WindowDropped: when it happened
  SeqId other = -1;           // the request involved (evicted by, compared with, dropped by)
  uint64_t other_engine = 0;  // which engine that request ran on (RequestStory::engine)
  int32_t token_pos = -1;     // PromptDiffers: first position where the two prompts differ
  TokenId token = -1;         // PromptDiffers: this prompt's token there
  TokenId other_token = -1;   // PromptDiffers: the other request's token there
  int32_t filled = 0;         // NotYetFull: tokens of the block that existed
  bool orphaned = false;      // Evicted: it went with a block before it in the chain
  std::string other_cache;    // SaltDiffers: the other engine's cache identity ("f32 · model.gguf")
};

struct PrefixLookup {
  int32_t prompt_tokens = 0;
  int32_t hit_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  int32_t blocks_attached = 0;
  int32_t shared_tokens = 0;  // longest common prefix with an earlier request of this engine
  SeqId shared_with = -1;     // that request
  PrefixMiss miss;
};

// Steps spent waiting for one reason, in one run of consecutive steps.
struct StoryWait {
  WaitReason reason = WaitReason::PoolFull;
  SeqId behind = -1;  // HeadOfLine: the request at the head of the queue
  uint64_t first_step = 0, last_step = 0;
  int64_t steps() const { return static_cast<int64_t>(last_step - first_step) + 1; }
};

struct StoryAdmission {
  uint64_t step = 0;
  double wait_ms = 0;  // since arrival (or since the preemption, for a resume)
  std::vector<StoryWait> waits;
  PrefixLookup lookup;
  bool resumed = false;           // after a preemption: its tokens are recomputed
  int32_t recomputed_tokens = 0;  // resumed: tokens computed again (the rest came from the cache)
};

struct StoryBlock {
  uint64_t step = 0;
  BlockId block = kNoBlock;
  int32_t group = 0;
};

struct StoryCopy {
  uint64_t step = 0;
  BlockId src = kNoBlock, dst = kNoBlock;
  int32_t group = 0;
};

struct StoryPreemption {
  uint64_t step = 0;
  SeqId by = -1;              // the running request whose growth needed the blocks (itself: its own)
  int32_t tokens_lost = 0;    // K/V thrown away (recomputed on resume, less what the cache returns)
  int32_t blocks_held = 0;    // what it held (KV group 0)
  int32_t blocks_freed = 0;   // of those, back in the pool (the rest stay with requests sharing them)
  int32_t blocks_cached = 0;  // of the freed, kept in the prefix cache (a resume may hit them)
  double pool_used_before_pct = 0, pool_used_after_pct = 0;
};

struct StoryFinish {
  uint64_t step = 0;
  SeqState state = SeqState::Finished;
  FinishReason reason = FinishReason::None;
  int32_t generated = 0;
  int32_t blocks_freed = 0;   // back on the free list
  int32_t blocks_cached = 0;  // kept in the prefix cache (evictable)
  std::string error;
};

// How much of the reply was reasoning (a reasoning model fills its KV cache with its thoughts):
// the tokens of its reasoning blocks, markers included, and the KV blocks that held them.
struct StoryReasoning {
  ReasoningFormat format = ReasoningFormat::Think;
  ReasoningSpan span;  // tokens, their output ranges, whether the reasoning ended
  int32_t blocks = 0;  // KV blocks (of the engine's block size) holding a reasoning token
  int32_t generated = 0;
};

struct RequestStory {
  uint64_t engine = 0;  // the engine it ran on (a log may outlive several engines)
  SeqId id = -1;
  std::string label;
  SeqId forked_from = -1;  // a parallel sample: its blocks came from this request, not a lookup
  uint64_t arrival_step = 0;
  double arrival_ms = 0;  // since the engine started
  int32_t prompt_tokens = 0;
  std::vector<StoryAdmission> admissions;  // the first, then one per resume after a preemption
  std::vector<StoryWait> pending_waits;    // waiting now (moved into the next admission)
  std::vector<StoryBlock> blocks;          // allocations, oldest first (the first kMaxBlocks)
  int32_t blocks_allocated = 0;            // all of them
  std::vector<StoryCopy> copies;
  std::vector<StoryPreemption> preemptions;
  int32_t window_drops = 0;
  uint64_t first_window_drop_step[2] = {0, 0};  // per KV group, 0: none
  std::optional<StoryFinish> finish;
  std::optional<StoryReasoning> reasoning;  // set at the finish of a request that parsed reasoning
  // For the next requests' prefix lookups: its tokens and how many had K/V when it ended.
  std::vector<TokenId> tokens;
  int32_t kv_tokens = 0;
  uint64_t hash_salt = 0;
  std::string cache_identity;  // "f32 · model.gguf"

  static constexpr size_t kMaxBlocks = 512;
  static constexpr size_t kMaxEntries = 64;  // copies, preemptions, waits
};

}  // namespace kvscope
