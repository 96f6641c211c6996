#pragma once
// A request's story told as a short timeline of plain sentences, each with the step it happened
// in (the window's story view and `kvscope-cli run --explain` print the same lines).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/request_story.h"

namespace kvscope {

struct StoryLine {
  uint64_t step = 0;
  std::string kind;  // arrival, wait, admission, lookup, miss, blocks, copy, preemption, window, finish
  std::string text;
};

// A token's text for a sentence ("'Lily'"); empty function: ids only.
using TokenText = std::function<std::string(TokenId)>;

std::vector<StoryLine> story_lines(const RequestStory& s, int32_t block_size, const TokenText& text = {});
// "block 3 (tokens 48-63) missed: ..." for a lookup's first miss ("" when nothing missed).
std::string describe_miss(const PrefixLookup& l, int32_t block_size, const TokenText& text = {});
const char* finish_reason_text(FinishReason r);

}  // namespace kvscope
