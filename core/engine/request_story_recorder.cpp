#include "engine/request_story_recorder.h"

#include <algorithm>

namespace kvscope {

namespace {
WaitReason wait_reason_of(AdmissionStop s) {
  switch (s) {
    case AdmissionStop::MaxRunning:
      return WaitReason::MaxRunning;
    case AdmissionStop::TokenBudget:
      return WaitReason::TokenBudget;
    case AdmissionStop::AfterPreemption:
      return WaitReason::AfterPreemption;
    default:
      return WaitReason::PoolFull;
  }
}

template <class T>
void push_bounded(std::vector<T>& v, T x) {
  if (v.size() < RequestStory::kMaxEntries) v.push_back(std::move(x));
}
}  // namespace

RequestStoryRecorder::RequestStoryRecorder(std::shared_ptr<RequestStoryLog> log, StoryKvInfo kv) : kv_(std::move(kv)) {
  use_log(log ? std::move(log) : std::make_shared<RequestStoryLog>());
}

void RequestStoryRecorder::use_log(std::shared_ptr<RequestStoryLog> log) {
  log_ = std::move(log);
  engine_ = log_->new_engine();
}

void RequestStoryRecorder::on_submit(const Sequence& s, const std::string& label, uint64_t step, double ms) {
  RequestStory& st = log_->open(engine_, s.id);
  st.label = label;
  st.arrival_step = step;
  st.arrival_ms = ms;
  st.prompt_tokens = s.prompt_len;
  st.hash_salt = kv_.groups.empty() ? 0 : kv_.groups[0].salt;
  st.cache_identity = kv_.cache_identity;
  queued_ms_[s.id] = ms;
}

void RequestStoryRecorder::on_forked(const Sequence& child, const std::string& label, SeqId parent, uint64_t step,
                                     double ms) {
  on_submit(child, label, step, ms);
  RequestStory& st = *story(child.id);
  st.forked_from = parent;
  StoryAdmission a;
  a.step = step;
  a.lookup.prompt_tokens = child.prompt_len;
  a.lookup.hit_tokens = child.num_computed;  // shared with the parent, not looked up
  a.lookup.blocks_attached = (child.num_computed + kv_.block_size - 1) / kv_.block_size;
  st.admissions.push_back(std::move(a));
  queued_ms_.erase(child.id);
}

void RequestStoryRecorder::on_schedule(const SchedulerOutput& out, const Scheduler& sched, uint64_t step, double ms) {
  for (const AdmissionInfo& a : out.admitted) note_admission(a, sched, step, ms);
  note_preemptions(out, step, ms);
  note_waits(out, sched, step);
}

void RequestStoryRecorder::note_admission(const AdmissionInfo& a, const Scheduler& sched, uint64_t step, double ms) {
  RequestStory* st = story(a.seq);
  if (!st) return;
  PendingAdmission p;
  p.seq = a.seq;
  p.adm.step = step;
  p.adm.wait_ms = ms - queued_ms_[a.seq];
  p.adm.waits = std::move(st->pending_waits);
  st->pending_waits.clear();
  p.adm.resumed = !st->admissions.empty();
  p.group_hits = a.group_hits;
  for (const Sequence* s : sched.running()) {
    if (s->id == a.seq)
      p.tokens = s->tokens;
    else
      p.kv_of_live[s->id] = s->num_computed;
  }
  p.adm.recomputed_tokens = p.adm.resumed ? static_cast<int32_t>(p.tokens.size()) - a.cached : 0;
  p.adm.lookup.hit_tokens = a.cached;
  pending_.push_back(std::move(p));
  queued_ms_.erase(a.seq);
}

void RequestStoryRecorder::note_preemptions(const SchedulerOutput& out, uint64_t step, double ms) {
  for (const PreemptionInfo& pi : out.preemption_info) {
    RequestStory* st = story(pi.victim);
    if (!st) continue;
    StoryPreemption p{.step = step,
                      .by = pi.by,
                      .tokens_lost = pi.tokens_lost,
                      .blocks_held = pi.blocks_held,
                      .blocks_freed = pi.blocks_released,
                      .pool_used_before_pct = pi.used_before_pct,
                      .pool_used_after_pct = pi.used_after_pct};
    if (st->preemptions.size() >= RequestStory::kMaxEntries) continue;
    preempted_now_[pi.victim] = st->preemptions.size();
    st->preemptions.push_back(p);
    queued_ms_[pi.victim] = ms;
  }
}

void RequestStoryRecorder::note_waits(const SchedulerOutput& out, const Scheduler& sched, uint64_t step) {
  const auto& waiting = sched.waiting();
  if (waiting.empty()) return;
  const SeqId head = waiting.front()->id;
  for (const Sequence* s : waiting) {
    RequestStory* st = story(s->id);
    if (!st) continue;
    const WaitReason r = s->id == head ? wait_reason_of(out.admission_stop) : WaitReason::HeadOfLine;
    const SeqId behind = r == WaitReason::HeadOfLine ? head : -1;
    auto& w = st->pending_waits;
    if (!w.empty() && w.back().reason == r && w.back().behind == behind && w.back().last_step + 1 == step) {
      w.back().last_step = step;  // one more step of the same wait
      continue;
    }
    push_bounded(w, StoryWait{.reason = r, .behind = behind, .first_step = step, .last_step = step});
  }
}

void RequestStoryRecorder::on_finished(const Sequence& s, uint64_t step, std::optional<StoryReasoning> reasoning) {
  RequestStory* st = story(s.id);
  if (!st) return;
  st->finish =
      StoryFinish{.step = step, .state = s.state, .reason = s.finish, .generated = s.num_generated(), .error = s.error};
  if (reasoning) {
    reasoning->blocks = reasoning->span.blocks(static_cast<int32_t>(s.prompt().size()), kv_.block_size);
    st->reasoning = std::move(reasoning);
  }
  st->tokens = s.tokens;
  st->kv_tokens = s.num_computed;
  queued_ms_.erase(s.id);
  finished_now_.push_back(s.id);
}

void RequestStoryRecorder::on_recorded(uint64_t step, const BlockEventRecorder& rec, KvSlotAllocator& kv,
                                       const SeqLookup& seq_of) {
  // Evictions first (from the allocator, which knows whose allocation took the block), so that
  // an admission of this step that missed a block evicted earlier in the same step sees it; its
  // own new blocks (registered this step) come after.
  evictions_.clear();
  kv.take_evictions(evictions_);
  for (const EvictionRecord& ev : evictions_) ledger_.evicted(ev.group, ev.hash, step, ev.by, ev.orphaned);
  for (PendingAdmission& p : pending_) explain(p, seq_of);
  pending_.clear();
  for (const HashChange& h : rec.last_hash_changes())
    if (h.registered) ledger_.registered(h.group, h.hash, step, h.seq);
  apply_events(step, rec);
  preempted_now_.clear();
  for (SeqId id : finished_now_) log_->close(engine_, id);
  finished_now_.clear();
}

void RequestStoryRecorder::apply_events(uint64_t step, const BlockEventRecorder& rec) {
  for (const BlockEvent& e : rec.last_recorded()) {
    switch (e.kind) {
      case BlockEventKind::Allocated:
        if (RequestStory* st = story(e.seq)) {
          if (st->blocks.size() < RequestStory::kMaxBlocks) st->blocks.push_back({step, e.block, e.group});
          ++st->blocks_allocated;
        }
        break;
      case BlockEventKind::CopiedOnWrite: {
        const auto& blocks = rec.blocks(e.group);
        const SeqId owner = e.block >= 0 && e.block < static_cast<BlockId>(blocks.size())
                                ? blocks[static_cast<size_t>(e.block)].owner
                                : -1;
        if (RequestStory* st = story(owner)) push_bounded(st->copies, StoryCopy{step, e.other, e.block, e.group});
        break;
      }
      case BlockEventKind::DroppedOutOfWindow:
        if (RequestStory* st = story(e.seq)) {
          ++st->window_drops;
          uint64_t& first = st->first_window_drop_step[e.group > 0 ? 1 : 0];
          if (first == 0) first = step;
        }
        break;
      case BlockEventKind::Freed:
        count_release(e.seq, false);
        break;
      case BlockEventKind::Cached:
        count_release(e.seq, true);
        break;
      default:
        break;
    }
  }
}

void RequestStoryRecorder::count_release(SeqId seq, bool cached) {
  RequestStory* st = story(seq);
  if (!st) return;
  if (auto it = preempted_now_.find(seq); it != preempted_now_.end()) {
    // Every held block was released (blocks_freed, from the scheduler: a block the preemptor
    // takes in the same step shows no event); the events say which stayed cached.
    if (cached) ++st->preemptions[it->second].blocks_cached;
  } else if (st->finish) {
    (cached ? st->finish->blocks_cached : st->finish->blocks_freed) += 1;
  }
}

std::vector<PromptCandidate> RequestStoryRecorder::candidates(const PendingAdmission& p,
                                                              const SeqLookup& seq_of) const {
  std::vector<PromptCandidate> out;
  for (const RequestStory* s : log_->all()) {
    if (s->engine == engine_ && s->id == p.seq) continue;
    const Sequence* live = s->engine == engine_ && !s->finish ? seq_of(s->id) : nullptr;
    if (live) {
      auto it = p.kv_of_live.find(s->id);
      out.push_back({s, live->tokens, it != p.kv_of_live.end() ? it->second : 0});
    } else {
      out.push_back({s, s->tokens, s->kv_tokens});
    }
  }
  return out;
}

void RequestStoryRecorder::explain(PendingAdmission& p, const SeqLookup& seq_of) {
  RequestStory* st = story(p.seq);
  if (!st) return;
  MissQuery q;
  q.prompt = p.tokens;
  q.hit_tokens = p.adm.lookup.hit_tokens;
  q.block_size = kv_.block_size;
  q.prefix_caching = kv_.prefix_caching;
  q.engine = engine_;
  q.groups = kv_.groups;
  for (size_t g = 0; g < q.groups.size(); ++g)
    q.groups[g].hit_tokens = g < p.group_hits.size() ? p.group_hits[g] : q.hit_tokens;
  p.adm.lookup = explain_prefix_lookup(q, ledger_, candidates(p, seq_of));
  st->admissions.push_back(std::move(p.adm));
}

}  // namespace kvscope
