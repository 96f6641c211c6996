#include "engine/scheduler.h"

#include <algorithm>
#include <span>
#include <stdexcept>

namespace kvscope {

int32_t SchedulerOutput::total_tokens() const {
  int32_t n = 0;
  for (const auto& c : chunks) n += c.n_tokens;
  return n;
}

Scheduler::Scheduler(const SchedulerConfig& cfg, KvSlotAllocator& kv) : cfg_(cfg), kv_(kv) {
  if (cfg.max_running <= 0 || cfg.max_batched_tokens <= 0 || cfg.max_model_len <= 0)
    throw std::invalid_argument("SchedulerConfig: max_running, max_batched_tokens and max_model_len must be > 0");
}

void Scheduler::add(Sequence* seq) {
  KV_CHECK(seq != nullptr, "add(nullptr)");
  seq->state = SeqState::Waiting;
  seq->arrival_step = step_;
  seq->arrival_order = next_arrival_++;
  waiting_.push_back(seq);
}

void Scheduler::add_running(Sequence* seq) {
  KV_CHECK(seq != nullptr, "add_running(nullptr)");
  KV_CHECK(kv_.has_seq(seq->id) && kv_.seq_len(seq->id) == seq->num_computed,
           "add_running: the sequence must already hold slots for its computed tokens");
  seq->state = SeqState::Running;
  seq->arrival_step = step_;
  seq->arrival_order = next_arrival_++;
  running_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
}

namespace {
double used_pct(const AllocatorSnap& a) {
  return a.total_slots > 0
             ? 100.0 * static_cast<double>(a.total_slots - a.total_free) / static_cast<double>(a.total_slots)
             : 0.0;
}
}  // namespace

void Scheduler::preempt(Sequence* seq, SeqId by, SchedulerOutput& out) {
  // Recompute, not swap: the blocks go back to the pool now; on resume prompt + output are
  // prefilled again as one prompt (the prefix cache may still hold most of them).
  // For its story: what it held, and (from the pool's free space around the free) how much of
  // that went back to the pool; the rest is shared with requests that keep it.
  const std::vector<BlockId> table = kv_.group_block_table(seq->id, 0);
  const AllocatorSnap before = kv_.allocator_snap();
  kv_.free(seq->id);
  const AllocatorSnap after = kv_.allocator_snap();
  const int64_t slots_per_block = std::max<int64_t>(1, before.total_slots / std::max(1, kv_.num_blocks(0)));
  PreemptionInfo info{.victim = seq->id,
                      .by = by,
                      .tokens_lost = seq->num_computed,
                      .blocks_held = static_cast<int32_t>(
                          std::count_if(table.begin(), table.end(), [](BlockId b) { return b != kNoBlock; })),
                      .blocks_released = static_cast<int32_t>((after.total_free - before.total_free) / slots_per_block),
                      .used_before_pct = used_pct(before),
                      .used_after_pct = used_pct(after)};
  out.preemption_info.push_back(info);
  remove(seq);
  seq->num_computed = 0;
  seq->state = SeqState::Preempted;
  ++seq->preemptions;
  ++preemptions_;
  waiting_.push_front(seq);  // it was admitted before everything still waiting
  out.preempted.push_back(seq->id);
}

void Scheduler::reject(Sequence* seq, std::string why, SchedulerOutput& out) {
  seq->error = std::move(why);
  finish(seq, SeqState::Rejected, FinishReason::Rejected);
  out.rejected.push_back(seq->id);
}

void Scheduler::finish(Sequence* seq, SeqState state, FinishReason reason) {
  KV_CHECK(is_final_state(state), "finish() needs a final state");
  kv_.free(seq->id);  // now, not at the next step: the UI shows the blocks back in the pool at once
  remove(seq);
  seq->state = state;
  seq->finish = reason;
}

void Scheduler::finish(Sequence* seq, SeqState state) {
  FinishReason reason = seq->finish;
  if (reason == FinishReason::None && state == SeqState::Cancelled) reason = FinishReason::Cancelled;
  if (reason == FinishReason::None && state == SeqState::Rejected) reason = FinishReason::Rejected;
  finish(seq, state, reason);
}

// Returns false when the head of the queue must wait (FCFS: nobody overtakes it).
bool Scheduler::try_admit(Sequence* seq, int32_t& budget, SchedulerOutput& out) {
  const std::span<const TokenId> tokens = seq->tokens;  // after a preemption: prompt + output, one prompt
  const int32_t len = static_cast<int32_t>(tokens.size());
  const int32_t need = len + 1;  // room for at least the next token
  if (len == 0) {
    reject(seq, "empty prompt: nothing to compute logits from", out);
    return true;
  }
  if (need > cfg_.max_model_len) {
    reject(seq,
           std::to_string(len) + " tokens + 1 to generate exceed max_model_len " + std::to_string(cfg_.max_model_len),
           out);
    return true;
  }
  if (auto why = kv_.never_fits(need, cfg_.max_batched_tokens); !why.empty()) {
    reject(seq, "KV cache too small: " + why, out);
    return true;
  }
  KV_CHECK(!kv_.has_seq(seq->id), "waiting sequence " + std::to_string(seq->id) + " still holds KV");
  const int32_t cached = kv_.peek_cached_prefix(tokens);
  const int32_t n = std::min(len - cached, budget);
  // What the request may grow to: an allocator that reserves up front sizes by it.
  const int32_t max_len = static_cast<int32_t>(
      std::min<int64_t>(static_cast<int64_t>(seq->prompt_len) + std::max(seq->max_new_tokens, 0), cfg_.max_model_len));
  if (!kv_.can_admit(tokens, cached + n, max_len)) {
    kv_.admission_blocked(tokens, cached + n, max_len);  // once per step: the loop stops here
    return false;
  }
  AdmissionInfo info{.seq = seq->id, .cached = cached, .group_hits = kv_.peek_cached_prefix_by_group(tokens)};
  const int32_t attached = kv_.attach_cached_prefix(seq->id, tokens);
  KV_CHECK(attached == cached, "prefix cache changed between the dry run and the attach");
  kv_.set_max_len(seq->id, max_len);
  if (!kv_.allocate_slots(seq->id, tokens.first(static_cast<size_t>(cached + n)), n)) {
    kv_.free(seq->id);  // can_admit promised otherwise; stay correct anyway
    return false;
  }
  waiting_.pop_front();
  running_.push_back(seq);
  seq->state = SeqState::Running;
  seq->num_computed = cached;
  seq->num_cached_prompt = cached;
  out.chunks.push_back(ScheduledChunk{seq, cached, n, cached + n == len});
  out.admitted.push_back(std::move(info));
  budget -= n;
  return true;
}

void Scheduler::admit_waiting(int32_t& budget, SchedulerOutput& out) {
  // Skipped in a step that preempted (as vLLM v1): admitting now would only take the blocks the
  // preemption just freed for the older sequences.
  if (!out.preempted.empty()) {
    if (!waiting_.empty()) out.admission_stop = AdmissionStop::AfterPreemption;
    return;
  }
  while (!waiting_.empty()) {
    if (static_cast<int32_t>(running_.size()) >= cfg_.max_running) {
      out.admission_stop = AdmissionStop::MaxRunning;
      return;
    }
    if (budget <= 0) {
      out.admission_stop = AdmissionStop::TokenBudget;
      return;
    }
    if (!try_admit(waiting_.front(), budget, out)) {
      out.admission_stop = AdmissionStop::PoolFull;
      return;
    }
  }
}

SchedulerOutput Scheduler::schedule() {
  ++step_;
  SchedulerOutput out;
  int32_t budget = cfg_.max_batched_tokens;

  // 1. Running sequences, oldest first: decodes get 1 token, unfinished prefills a chunk.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const std::span<const TokenId> tokens = s->tokens;
    const int32_t total = static_cast<int32_t>(tokens.size());
    KV_CHECK(kv_.seq_len(s->id) == s->num_computed,
             "sequence " + std::to_string(s->id) + ": KV length != num_computed");
    if (total > cfg_.max_model_len) {
      // Its newest token would need position max_model_len: it is done, by length.
      finish(s, SeqState::Finished, FinishReason::Length);
      out.length_capped.push_back(s->id);
      continue;
    }
    if (s->num_computed >= total) {  // nothing new to compute (engine did not append)
      ++i;
      continue;
    }
    const int32_t n = std::min(total - s->num_computed, budget);
    bool placed = true;
    while (!kv_.allocate_slots(s->id, tokens.first(static_cast<size_t>(s->num_computed + n)), n)) {
      // The newest is always unscheduled this step (we walk oldest first), unless it is s.
      Sequence* victim = running_.back();
      preempt(victim, s->id, out);
      if (victim == s) {
        placed = false;
        break;
      }
    }
    if (!placed) break;  // s was the newest: everything after it is already preempted
    out.chunks.push_back(ScheduledChunk{s, s->num_computed, n, s->num_computed + n == total});
    budget -= n;
    ++i;
  }

  // 2. Admission, FCFS.
  admit_waiting(budget, out);

  out.copies = kv_.take_pending_copies();
  out.released = kv_.take_released_blocks();
  return out;
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const auto& c : out.chunks) {
    if (c.seq->state != SeqState::Running) continue;  // finished or cancelled meanwhile
    KV_CHECK(c.seq->num_computed == c.first_pos, "chunk applied twice or out of order");
    c.seq->num_computed += c.n_tokens;
  }
}

void Scheduler::end_step(const SchedulerOutput& out) {
  if (!cfg_.recompute_every_token) return;
  for (const ScheduledChunk& ch : out.chunks)
    if (ch.wants_logits && ch.seq->state == SeqState::Running) {
      // Forget every K/V: the next token recomputes the whole sequence. The empty allocation
      // re-registers the sequence with length 0, as a running sequence with nothing computed.
      kv_.free(ch.seq->id);
      ch.seq->num_computed = 0;
      kv_.allocate_slots(ch.seq->id, ch.seq->tokens, 0);
    }
}

}  // namespace kvscope
