#include "engine/request_story_log.h"

namespace kvscope {

RequestStory& RequestStoryLog::open(uint64_t engine, SeqId id) {
  RequestStory& s = live_[{engine, id}];
  s = RequestStory{};
  s.engine = engine;
  s.id = id;
  return s;
}

RequestStory* RequestStoryLog::live(uint64_t engine, SeqId id) {
  auto it = live_.find({engine, id});
  return it == live_.end() ? nullptr : &it->second;
}

void RequestStoryLog::close(uint64_t engine, SeqId id) {
  auto it = live_.find({engine, id});
  if (it == live_.end()) return;
  finished_.push_back(std::move(it->second));
  live_.erase(it);
  while (finished_.size() > max_finished_) {
    finished_.pop_front();
    ++dropped_;
  }
}

const RequestStory* RequestStoryLog::find(SeqId id, uint64_t engine) const {
  const uint64_t e = engine ? engine : engines_;
  if (auto it = live_.find({e, id}); it != live_.end()) return &it->second;
  for (auto it = finished_.rbegin(); it != finished_.rend(); ++it)
    if (it->id == id && it->engine == e) return &*it;
  return nullptr;
}

std::vector<const RequestStory*> RequestStoryLog::all() const {
  std::vector<const RequestStory*> out;
  out.reserve(finished_.size() + live_.size());
  for (const RequestStory& s : finished_) out.push_back(&s);
  for (const auto& [k, s] : live_) out.push_back(&s);
  return out;
}

}  // namespace kvscope

namespace kvscope {

const char* wait_reason_name(WaitReason r) {
  switch (r) {
    case WaitReason::PoolFull:
      return "pool_full";
    case WaitReason::MaxRunning:
      return "max_running";
    case WaitReason::TokenBudget:
      return "token_budget";
    case WaitReason::AfterPreemption:
      return "after_preemption";
    case WaitReason::HeadOfLine:
      return "head_of_line";
  }
  return "?";
}

const char* miss_reason_name(MissReason r) {
  switch (r) {
    case MissReason::None:
      return "none";
    case MissReason::PrefixCachingOff:
      return "prefix_caching_off";
    case MissReason::NeverCached:
      return "never_cached";
    case MissReason::Evicted:
      return "evicted";
    case MissReason::PromptDiffers:
      return "prompt_differs";
    case MissReason::NotYetFull:
      return "not_yet_full";
    case MissReason::LastPromptToken:
      return "last_prompt_token";
    case MissReason::SaltDiffers:
      return "salt_differs";
    case MissReason::NoStateCheckpoint:
      return "no_state_checkpoint";
    case MissReason::WindowDropped:
      return "window_dropped";
  }
  return "?";
}

}  // namespace kvscope
