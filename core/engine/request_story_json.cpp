#include "engine/request_story_json.h"

namespace kvscope {

namespace {
using nlohmann::json;

json waits_json(const std::vector<StoryWait>& waits) {
  json a = json::array();
  for (const StoryWait& w : waits)
    a.push_back({{"reason", wait_reason_name(w.reason)},
                 {"behind", w.behind},
                 {"first_step", w.first_step},
                 {"last_step", w.last_step},
                 {"steps", w.steps()}});
  return a;
}

json miss_json(const PrefixMiss& m, const TokenText& text) {
  json j = {{"reason", miss_reason_name(m.reason)},
            {"block_index", m.block_index},
            {"group", m.group},
            {"step", m.step},
            {"other", m.other},
            {"other_engine", m.other_engine},
            {"token_pos", m.token_pos},
            {"token", m.token},
            {"other_token", m.other_token},
            {"filled", m.filled},
            {"orphaned", m.orphaned},
            {"other_cache", m.other_cache}};
  if (text && m.reason == MissReason::PromptDiffers) {
    j["token_text"] = text(m.token);
    j["other_token_text"] = text(m.other_token);
  }
  return j;
}

json admission_json(const StoryAdmission& a, int32_t bs, const TokenText& text) {
  const PrefixLookup& l = a.lookup;
  return {{"step", a.step},
          {"wait_ms", a.wait_ms},
          {"resumed", a.resumed},
          {"recomputed_tokens", a.recomputed_tokens},
          {"waits", waits_json(a.waits)},
          {"lookup",
           {{"prompt_tokens", l.prompt_tokens},
            {"hit_tokens", l.hit_tokens},
            {"blocks_attached", l.blocks_attached},
            {"shared_tokens", l.shared_tokens},
            {"shared_with", l.shared_with},
            {"miss", miss_json(l.miss, text)},
            {"text", describe_miss(l, bs, text)}}}};
}

json finish_json(const std::optional<StoryFinish>& f) {
  if (!f) return nullptr;
  return {{"step", f->step},           {"state", seq_state_name(f->state)}, {"reason", finish_reason_text(f->reason)},
          {"generated", f->generated}, {"blocks_freed", f->blocks_freed},   {"blocks_cached", f->blocks_cached},
          {"error", f->error}};
}
}  // namespace

json story_to_json(const RequestStory& s, int32_t bs, const TokenText& text) {
  json j = {{"engine", s.engine},
            {"id", s.id},
            {"label", s.label},
            {"forked_from", s.forked_from},
            {"arrival", {{"step", s.arrival_step}, {"ms", s.arrival_ms}}},
            {"prompt_tokens", s.prompt_tokens},
            {"blocks_allocated", s.blocks_allocated},
            {"window_drops", s.window_drops}};
  j["admissions"] = json::array();
  for (const StoryAdmission& a : s.admissions) j["admissions"].push_back(admission_json(a, bs, text));
  j["waiting"] = waits_json(s.pending_waits);
  j["blocks"] = json::array();
  for (const StoryBlock& b : s.blocks)
    j["blocks"].push_back({{"step", b.step}, {"block", b.block}, {"group", b.group}});
  j["copies"] = json::array();
  for (const StoryCopy& c : s.copies)
    j["copies"].push_back({{"step", c.step}, {"src", c.src}, {"dst", c.dst}, {"group", c.group}});
  j["preemptions"] = json::array();
  for (const StoryPreemption& p : s.preemptions)
    j["preemptions"].push_back({{"step", p.step},
                                {"by", p.by},
                                {"tokens_lost", p.tokens_lost},
                                {"blocks_held", p.blocks_held},
                                {"blocks_freed", p.blocks_freed},
                                {"blocks_cached", p.blocks_cached},
                                {"pool_used_before_pct", p.pool_used_before_pct},
                                {"pool_used_after_pct", p.pool_used_after_pct}});
  j["finish"] = finish_json(s.finish);
  if (s.reasoning) {
    json ranges = json::array();
    for (const auto& [a, b] : s.reasoning->span.ranges) ranges.push_back({a, b});
    j["reasoning"] = {{"format", reasoning_format_name(s.reasoning->format)},
                      {"tokens", s.reasoning->span.tokens},
                      {"blocks", s.reasoning->blocks},
                      {"closed", s.reasoning->span.closed},
                      {"output_ranges", ranges}};
  } else {
    j["reasoning"] = nullptr;
  }
  j["timeline"] = json::array();
  for (const StoryLine& l : story_lines(s, bs, text))
    j["timeline"].push_back({{"step", l.step}, {"kind", l.kind}, {"text", l.text}});
  return j;
}

}  // namespace kvscope
