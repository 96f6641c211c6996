#include "engine/request_story_kv_info.h"

#include <filesystem>

#include "kv/hybrid_kv_manager.h"
#include "kv/kv_cache_manager.h"
#include "kv/state_slot_manager.h"

namespace kvscope {

StoryKvInfo story_kv_info(const Model& model, const EngineConfig& cfg, const KvSlotAllocator& any_kv) {
  // A hybrid recurrent model's state slots wrap the KV allocator whose blocks the story follows.
  const auto* slots = dynamic_cast<const StateSlotManager*>(&any_kv);
  const KvSlotAllocator& kv = slots ? slots->inner() : any_kv;
  StoryKvInfo info;
  info.block_size = cfg.block_size;
  const std::string file = model.file ? std::filesystem::path(model.file->path()).filename().string() : "model";
  info.cache_identity = std::string(kv_dtype_name(cfg.kv_dtype)) + " · " + file;
  auto add = [&](const KvCacheManager& m) {
    info.groups.push_back(LookupGroup{.salt = m.config().hash_salt, .window = m.config().sliding_window});
    info.prefix_caching = m.config().prefix_caching;
  };
  if (const auto* h = dynamic_cast<const HybridKvManager*>(&kv)) {
    add(h->group(HybridKvManager::kGlobal));
    add(h->group(HybridKvManager::kSliding));
  } else if (const auto* p = dynamic_cast<const KvCacheManager*>(&kv)) {
    add(*p);
  } else {
    info.prefix_caching = false;  // the contiguous baseline has no block cache
    info.groups.push_back({});
  }
  return info;
}

}  // namespace kvscope
