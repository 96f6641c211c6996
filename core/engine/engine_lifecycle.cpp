// How requests end and how parallel samples start: the engine's half of a request's life
// (the scheduler frees the KV; the engine counts, notifies and forks).
#include "engine/engine.h"

namespace kvscope {

void Engine::finish(RequestRecord& rt, SeqState state, FinishReason reason) {
  Sequence& s = rt.seq;
  if (s.is_finished()) return;
  if (state == SeqState::Rejected && s.error.empty()) s.error = "rejected";
  sched_->finish(&s, state, reason);
  count_finished(rt);
}

// After the scheduler ended rt (here, or itself in schedule()): counters, callbacks, and the
// parallel samples that were never forked end the way their parent did.
void Engine::count_finished(RequestRecord& rt) {
  const SeqState state = rt.seq.state;
  rt.finished_step = counters_.steps;
  stories_->on_finished(rt.seq, counters_.steps, reasoning_of(rt));
  end_unforked_children(rt);
  if (state == SeqState::Finished) ++counters_.requests_finished;
  if (state == SeqState::Cancelled) ++counters_.requests_cancelled;
  if (state == SeqState::Rejected) ++counters_.requests_rejected;
  if (callbacks_.on_finished) callbacks_.on_finished(rt.seq.id);
}

// The reply's reasoning, told in its story (nullopt when the request asked for no parsing).
std::optional<StoryReasoning> Engine::reasoning_of(const RequestRecord& rt) const {
  if (!rt.reasoning.on() || !model_->tokenizer) return std::nullopt;
  return StoryReasoning{.format = rt.reasoning.format,
                        .span = reasoning_span(*model_->tokenizer, rt.reasoning, rt.seq.output()),
                        .generated = rt.seq.num_generated()};
}

void Engine::end_unforked_children(RequestRecord& parent) {
  if (parent.pending_forks == 0) return;
  parent.pending_forks = 0;
  const Sequence& s = parent.seq;
  for (SeqId cid : parent.child_ids) {
    auto child = std::make_unique<RequestRecord>();
    child->seq.id = cid;
    child->seq.set_prompt(std::vector<TokenId>(s.prompt().begin(), s.prompt().end()));
    child->seq.state = s.state;
    child->seq.finish = s.finish;
    child->seq.error = s.error.empty() ? "its parallel-sampling parent ended before the prompt was computed" : s.error;
    child->label = parent.fork_template.label;
    child->finished_step = counters_.steps;
    requests_.emplace(cid, std::move(child));
    if (s.state == SeqState::Cancelled) ++counters_.requests_cancelled;
    if (s.state == SeqState::Rejected) ++counters_.requests_rejected;
    if (callbacks_.on_finished) callbacks_.on_finished(cid);
  }
}

std::vector<RequestRecord*> Engine::fork_children(RequestRecord& parent) {
  std::vector<RequestRecord*> children;
  const int n = parent.pending_forks;
  parent.pending_forks = 0;
  for (int i = 1; i <= n; ++i) {
    auto rt = std::make_unique<RequestRecord>();
    Sequence& s = rt->seq;
    s.id = parent.child_ids[static_cast<size_t>(i - 1)];
    s.set_prompt(parent.seq.tokens);
    s.max_new_tokens = parent.seq.max_new_tokens;
    s.ignore_eos = parent.seq.ignore_eos;
    s.stop_tokens = parent.seq.stop_tokens;
    s.sampling = parent.fork_template.sampling;
    s.sampling.seed += static_cast<uint64_t>(i);
    s.num_computed = parent.seq.num_computed;
    rt->label = parent.fork_template.label + " #" + std::to_string(i + 1);
    rt->reasoning = parent.reasoning;
    rt->sampler = std::make_unique<Sampler>(s.sampling);
    rt->record_logits = parent.record_logits;
    rt->submitted = parent.submitted;
    kv_->fork(parent.seq.id, s.id);  // shares every block; the partial last one is copied on write
    sched_->add_running(&s);
    stories_->on_forked(s, rt->label, parent.seq.id, counters_.steps, now_ms());
    children.push_back(rt.get());
    requests_.emplace(s.id, std::move(rt));
  }
  parent.label += " #1";
  return children;
}

}  // namespace kvscope
