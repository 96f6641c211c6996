#pragma once
// A request story as JSON (`kvscope-cli run --explain --json-out F`); the schema is in the
// docs/window-and-lessons.md ("Every request's KV story").
#include <nlohmann/json.hpp>

#include "engine/request_story.h"
#include "engine/request_story_text.h"

namespace kvscope {

nlohmann::json story_to_json(const RequestStory& s, int32_t block_size, const TokenText& text = {});

}  // namespace kvscope
