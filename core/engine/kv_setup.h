#pragma once
// Which KV allocator an engine gets, and the backend's KV storage to match: the paged
// KvCacheManager, the hybrid KV cache (two groups: global and sliding layers) or the contiguous
// baseline. The engine only ever sees the KvSlotAllocator interface and its read-only view.
#include <memory>
#include <string>

#include "engine/backend.h"
#include "engine/engine_config.h"
#include "kv/kv_slot_allocator.h"
#include "kv/state_slot_manager.h"
#include "model/model.h"

namespace kvscope {

struct KvSetup {
  std::unique_ptr<KvSlotAllocator> kv;
  int32_t sliding_window = 0;               // hybrid: the sliding group's window
  int32_t sliding_blocks_per_seq = 1;       // hybrid: sliding blocks one decoding sequence holds at most
  StateSlotManager* state_slots = nullptr;  // models with recurrent layers: `kv` itself, wrapping the KV allocator
};

// Resolves cfg in place (max_model_len 0 -> the model's context, derived pool sizes, prefix
// caching off without a KV cache), initialises the backend's KV storage and builds the allocator.
// Throws std::invalid_argument with every problem of validate() or of the pool split.
KvSetup make_kv_setup(const Model& model, Backend& backend, EngineConfig& cfg);

// The prefix cache's hash salt (kv/block_hash.h): cached K/V are only valid for the same model
// and KV codec, so the salt names the model file, the KV dtype and, for the packed 4/2-bit
// dtypes, the quantization group (the same tokens stored with another group are other bytes).
uint64_t kv_cache_salt(const std::string& model_path, KvDtype dtype, int32_t quant_group);

// Why the model/config/backend cannot use the hybrid KV cache (empty when they can).
std::string hybrid_unavailable_reason(const ModelConfig& mc, const EngineConfig& cfg, const Backend& backend);

}  // namespace kvscope
