#include "engine/request_story_text.h"

#include <algorithm>
#include <cstdio>

namespace kvscope {

namespace {

std::string num(double v, int decimals = 0) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}
std::string req(SeqId id) { return "request " + std::to_string(id); }
std::string blocks(int32_t n) { return std::to_string(n) + (n == 1 ? " block" : " blocks"); }

std::string token(TokenId t, const TokenText& text) {
  std::string s = "token " + std::to_string(t);
  if (text) s += " '" + text(t) + "'";
  return s;
}

std::string wait_text(const StoryWait& w) {
  std::string span = w.steps() == 1 ? "1 step" : std::to_string(w.steps()) + " steps";
  std::string why;
  switch (w.reason) {
    case WaitReason::PoolFull:
      why = "the KV pool had no room for its first chunk";
      break;
    case WaitReason::MaxRunning:
      why = "the batch already ran the most requests allowed (max running)";
      break;
    case WaitReason::TokenBudget:
      why = "the step's token budget was already spent";
      break;
    case WaitReason::AfterPreemption:
      why = "a preemption freed blocks for older requests, so nobody was admitted";
      break;
    case WaitReason::HeadOfLine:
      why = req(w.behind) + " at the head of the queue could not start (first come, first served)";
      break;
  }
  return "Waited " + span + " (steps " + std::to_string(w.first_step) + "-" + std::to_string(w.last_step) +
         "): " + why + ".";
}

std::string miss_body(const PrefixMiss& m, int32_t bs, const TokenText& text) {
  switch (m.reason) {
    case MissReason::None:
      return "";
    case MissReason::PrefixCachingOff:
      return "prefix caching is off.";
    case MissReason::NeverCached:
      return "no request in the kept history had computed these tokens, so they were never cached.";
    case MissReason::Evicted:
      if (m.orphaned)
        return "it had been cached, but at step " + std::to_string(m.step) + " " + req(m.other) +
               "'s allocation evicted a block before it in the hash chain, which un-cached it too.";
      return "it had been cached, but was evicted at step " + std::to_string(m.step) + " to make room for " +
             req(m.other) + "'s allocation.";
    case MissReason::PromptDiffers:
      return "this prompt differs from " + req(m.other) + "'s at token " + std::to_string(m.token_pos) + ": " +
             token(m.token, text) + " here, " + token(m.other_token, text) + " there.";
    case MissReason::NotYetFull:
      if (m.other < 0)
        return "it holds only " + std::to_string(m.filled) + " of " + std::to_string(bs) +
               " tokens (the prompt ends there); a block is cached only when full.";
      return req(m.other) + " had computed only " + std::to_string(m.filled) + " of its " + std::to_string(bs) +
             " tokens; a block enters the prefix cache only when it is full.";
    case MissReason::LastPromptToken:
      return "it holds the prompt's last token, which is always recomputed: its forward pass makes the first new token's logits.";
    case MissReason::SaltDiffers:
      return req(m.other) + " of an earlier engine cached these tokens as " + m.other_cache +
             "; this engine stores another KV dtype or model, and such K/V never match.";
    case MissReason::NoStateCheckpoint:
      return "its K/V were cached, but the model's recurrent layers need their state at the hit's end too, and "
             "the last state checkpoint at or below the cached blocks ends before this block (--state-checkpoints "
             "sets which block boundaries keep one).";
    case MissReason::WindowDropped:
      return req(m.other) + "'s sliding window dropped the block before it at step " + std::to_string(m.step) +
             ", before this one was full, which broke the hash chain: it was never cached" +
             (m.group > 0 ? " in the sliding layers' pool." : ".");
  }
  return "";
}

void admission_lines(const RequestStory& s, const StoryAdmission& a, int32_t bs, const TokenText& text,
                     std::vector<StoryLine>& out) {
  for (const StoryWait& w : a.waits) out.push_back({w.first_step, "wait", wait_text(w)});
  const PrefixLookup& l = a.lookup;
  if (s.forked_from >= 0 && !a.resumed) {
    out.push_back({a.step, "admission",
                   "Forked from " + req(s.forked_from) + ": shares its " + std::to_string(l.hit_tokens) +
                       " computed tokens (" + std::to_string(l.blocks_attached) + " blocks) without copying them."});
    return;
  }
  std::string head = a.resumed ? "Resumed" : "Admitted";
  head += " at step " + std::to_string(a.step) + " after waiting " + num(a.wait_ms, 1) + " ms";
  if (a.resumed) head += "; recomputed " + std::to_string(a.recomputed_tokens) + " tokens";
  out.push_back({a.step, "admission", head + "."});
  out.push_back({a.step, "lookup",
                 "Prefix cache: " + std::to_string(l.hit_tokens) + " of " + std::to_string(l.prompt_tokens) +
                     " prompt tokens hit (" + std::to_string(l.blocks_attached) + " blocks attached)."});
  if (const std::string m = describe_miss(l, bs, text); !m.empty()) out.push_back({a.step, "miss", m});
}

void block_lines(const RequestStory& s, std::vector<StoryLine>& out) {
  for (size_t i = 0; i < s.blocks.size();) {
    size_t j = i;
    std::string list;
    while (j < s.blocks.size() && s.blocks[j].step == s.blocks[i].step) {
      list +=
          (list.empty() ? "" : ", ") + std::to_string(s.blocks[j].block) + (s.blocks[j].group > 0 ? " (sliding)" : "");
      ++j;
    }
    out.push_back({s.blocks[i].step, "blocks", std::string(j - i == 1 ? "Took block " : "Took blocks ") + list + "."});
    i = j;
  }
  if (s.blocks_allocated > static_cast<int32_t>(s.blocks.size()))
    out.push_back(
        {s.blocks.back().step, "blocks",
         "... and " + std::to_string(s.blocks_allocated - static_cast<int32_t>(s.blocks.size())) + " more blocks."});
  for (const StoryCopy& c : s.copies)
    out.push_back({c.step, "copy",
                   "Block " + std::to_string(c.src) + " was shared and partly filled, so it was copied to block " +
                       std::to_string(c.dst) + " before this request wrote into it (copy-on-write)."});
  if (s.window_drops > 0) {
    const uint64_t first = s.first_window_drop_step[0] ? s.first_window_drop_step[0] : s.first_window_drop_step[1];
    out.push_back({first, "window",
                   std::to_string(s.window_drops) + (s.window_drops == 1 ? " block" : " blocks") +
                       " fell out of the sliding window (the first at this step) and went back to the pool."});
  }
}

void preemption_lines(const RequestStory& s, std::vector<StoryLine>& out) {
  for (const StoryPreemption& p : s.preemptions) {
    const std::string who =
        p.by == s.id ? "its own next tokens did not fit" : req(p.by) + " needed blocks for its next tokens";
    std::string t = "Preempted at step " + std::to_string(p.step) + ": the pool was " + num(p.pool_used_before_pct) +
                    "% used and " + who + ". It lost " + std::to_string(p.tokens_lost) + " computed tokens; of its " +
                    blocks(p.blocks_held) + ", " + std::to_string(p.blocks_freed) + " went back to the pool (" +
                    std::to_string(p.blocks_cached) + " kept in the prefix cache)";
    if (p.blocks_held > p.blocks_freed)
      t += " and " + std::to_string(p.blocks_held - p.blocks_freed) + " stay with requests sharing them";
    out.push_back({p.step, "preemption", t + "; the pool went to " + num(p.pool_used_after_pct) + "% used."});
  }
}

}  // namespace

const char* finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::None:
      return "unfinished";
    case FinishReason::Length:
      return "length limit";
    case FinishReason::Eos:
      return "end of sequence";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Rejected:
      return "rejected";
  }
  return "?";
}

std::string describe_miss(const PrefixLookup& l, int32_t bs, const TokenText& text) {
  const PrefixMiss& m = l.miss;
  if (m.reason == MissReason::None || m.block_index < 0) return "";
  const int32_t first = m.block_index * bs;
  const int32_t last = std::min(first + bs, std::max(l.prompt_tokens, first + 1)) - 1;
  return "Block " + std::to_string(m.block_index) + " (tokens " + std::to_string(first) + "-" + std::to_string(last) +
         ") missed: " + miss_body(m, bs, text);
}

// How much of the reply was thinking: a reasoning model's thoughts take KV blocks like any text.
std::string reasoning_text(const StoryReasoning& r, int32_t bs) {
  const std::string head = std::string("Reasoning (") + reasoning_format_name(r.format) + "): ";
  if (r.span.tokens == 0)
    return head + "none; all " + std::to_string(r.generated) + " generated tokens are the answer.";
  const int pct = r.generated > 0 ? static_cast<int>(100.0 * r.span.tokens / r.generated + 0.5) : 0;
  std::string t = head + std::to_string(r.span.tokens) + " of the " + std::to_string(r.generated) +
                  " generated tokens (" + std::to_string(pct) + "%) were thinking, held in " + blocks(r.blocks) +
                  " of " + std::to_string(bs) + " tokens";
  return t + (r.span.closed ? "; the answer followed." : "; the reply ended while still thinking, with no answer.");
}

std::vector<StoryLine> story_lines(const RequestStory& s, int32_t bs, const TokenText& text) {
  std::vector<StoryLine> out;
  out.push_back({s.arrival_step, "arrival",
                 "Arrived at step " + std::to_string(s.arrival_step) + " with a " + std::to_string(s.prompt_tokens) +
                     "-token prompt (" + s.label + ")."});
  for (const StoryAdmission& a : s.admissions) admission_lines(s, a, bs, text, out);
  for (const StoryWait& w : s.pending_waits) out.push_back({w.first_step, "wait", wait_text(w)});
  block_lines(s, out);
  preemption_lines(s, out);
  if (const auto& f = s.finish) {
    std::string t = "Finished at step " + std::to_string(f->step) + " (" + finish_reason_text(f->reason) + ")";
    if (!f->error.empty()) t += ": " + f->error;
    t += " after generating " + std::to_string(f->generated) + " tokens; " + blocks(f->blocks_freed) +
         " went back to the free list, " + std::to_string(f->blocks_cached) + " stay in the prefix cache.";
    out.push_back({f->step, "finish", t});
    if (s.reasoning) out.push_back({f->step, "reasoning", reasoning_text(*s.reasoning, bs)});
  }
  std::stable_sort(out.begin(), out.end(), [](const StoryLine& a, const StoryLine& b) { return a.step < b.step; });
  return out;
}

}  // namespace kvscope
