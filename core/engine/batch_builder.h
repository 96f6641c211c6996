#pragma once
// One step's batch from the scheduler's plan: every scheduled chunk's tokens, positions, slots
// in each KV group, block tables, and which rows need logits (the sampling row of a chunk that
// ends its sequence, plus every prompt row of a request recording prompt logits).
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/request_record.h"
#include "engine/scheduler.h"

namespace kvscope {

struct StepBatch {
  BatchView view;
  std::vector<std::vector<BlockId>> tables;             // [group][seq]: what view's spans point into
  std::vector<std::pair<int32_t, int32_t>> chunk_rows;  // per chunk: first logits row, rows
  uint64_t prefilled_tokens = 0;                        // tokens that are not a decode step
  StepBatch() = default;
  StepBatch(const StepBatch&) = delete;  // view holds spans into tables
  StepBatch& operator=(const StepBatch&) = delete;
};

void build_batch(const SchedulerOutput& out, const KvSlotAllocator& kv,
                 const std::unordered_map<SeqId, std::unique_ptr<RequestRecord>>& requests, StepBatch& b);

}  // namespace kvscope
