#pragma once
// The prefix cache's shape as the request stories need it (block size, salts and windows per KV
// group), read from whichever allocator the engine has.
#include "engine/engine_config.h"
#include "engine/request_story_recorder.h"
#include "kv/kv_slot_allocator.h"
#include "model/model.h"

namespace kvscope {

StoryKvInfo story_kv_info(const Model& model, const EngineConfig& cfg, const KvSlotAllocator& kv);

}  // namespace kvscope
