#pragma once
// Builds the immutable Snapshot a step leaves behind from the engine's parts, reading the KV
// allocator only through its read-only view (kv/kv_slot_allocator.h) and the block states the
// BlockEventRecorder keeps current: the same code for the paged, hybrid and baseline allocators.
#include <memory>
#include <unordered_map>

#include "engine/backend.h"
#include "engine/block_event_recorder.h"
#include "engine/engine_config.h"
#include "engine/request_record.h"
#include "model/model.h"
#include "telemetry/snapshot.h"

namespace kvscope {

struct SnapshotSources {
  const EngineConfig& cfg;
  const Model& model;
  const Backend& backend;
  const KvSlotAllocator& kv;
  const BlockEventRecorder& recorder;
  const std::unordered_map<SeqId, std::unique_ptr<RequestRecord>>& requests;
  int32_t sliding_window = 0;  // the hybrid KV cache's sliding group
  int32_t running = 0, waiting = 0;
  EngineCounters counters;
  double elapsed_s = 0, step_ms = 0, tokens_per_s = 0;
};

std::shared_ptr<Snapshot> build_snapshot(const SnapshotSources& src, std::vector<BlockEvent> events);

}  // namespace kvscope
