#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "engine/kv_summary.h"
#include "engine/request_story_kv_info.h"
#include "engine/snapshot_builder.h"

namespace kvscope {

Engine::Engine(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend, const EngineConfig& cfg)
    : model_(std::move(model)), backend_(std::move(backend)), cfg_(cfg), start_(Clock::now()) {
  kv_setup_ = make_kv_setup(*model_, *backend_, cfg_);
  kv_ = kv_setup_.kv.get();
  sched_ = std::make_unique<Scheduler>(cfg_.sched, *kv_);
  recorder_ = std::make_unique<BlockEventRecorder>(*kv_, cfg_.max_events);
  stories_ = std::make_unique<RequestStoryRecorder>(nullptr, story_kv_info(*model_, cfg_, *kv_));
  if (cfg_.evict.on()) {
    std::vector<int32_t> layer_windows;  // the model's own sliding-window layers (per-layer eviction)
    const ModelConfig& mc = model_->config;
    for (int32_t il = 0; il < mc.n_layer; ++il) layer_windows.push_back(mc.layer_is_swa(il) ? mc.sliding_window : 0);
    evictor_ = std::make_unique<TokenEvictor>(cfg_.evict, cfg_.window, cfg_.sinks, *dynamic_cast<KvCacheManager*>(kv_),
                                              *backend_, std::move(layer_windows));
  }
  publish_snapshot();
}

Engine::~Engine() = default;

// Through the recurrent-state wrapper (kv/state_slot_manager.h) to the KV allocator it wraps.
static const KvSlotAllocator* kv_allocator(const KvSlotAllocator* kv) {
  const auto* s = dynamic_cast<const StateSlotManager*>(kv);
  return s ? &s->inner() : kv;
}

const KvCacheManager* Engine::paged_kv() const {
  if (const auto* h = hybrid_kv()) return &h->group(HybridKvManager::kGlobal);
  return dynamic_cast<const KvCacheManager*>(kv_allocator(kv_));
}
const HybridKvManager* Engine::hybrid_kv() const { return dynamic_cast<const HybridKvManager*>(kv_allocator(kv_)); }
const ContiguousKvManager* Engine::contiguous_kv() const {
  return dynamic_cast<const ContiguousKvManager*>(kv_allocator(kv_));
}

std::string Engine::kv_summary() const {
  return describe_kv_pools(*backend_, cfg_.sched.max_model_len, kv_setup_.sliding_window,
                           kv_setup_.sliding_blocks_per_seq) +
         describe_borrowed_kv(model_->config) + describe_state_slots(*backend_, kv_setup_.state_slots);
}

const RequestRecord& Engine::record(SeqId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) throw std::out_of_range("unknown sequence " + std::to_string(id));
  return *it->second;
}
RequestRecord& Engine::record(SeqId id) { return const_cast<RequestRecord&>(std::as_const(*this).record(id)); }

static std::string request_error(const Request& r, int32_t n_vocab) {
  if (r.max_new_tokens < 0) return "max_new_tokens must not be negative";
  if (r.prompt.empty()) return "empty prompt: at least one token is needed";
  for (TokenId t : r.prompt)
    if (t < 0 || t >= n_vocab)
      return "token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")";
  return {};
}

SeqId Engine::submit(const Request& r) {
  snapshot_stale_ = true;
  auto rt = std::make_unique<RequestRecord>();
  Sequence& s = rt->seq;
  s.id = next_id_++;
  s.set_prompt(r.prompt);
  s.max_new_tokens = r.max_new_tokens;
  s.ignore_eos = r.ignore_eos;
  s.stop_tokens = r.stop_tokens;
  s.sampling = r.sampling;
  s.arrival_step = static_cast<int64_t>(counters_.steps);
  s.arrival_order = arrival_counter_++;
  rt->label = r.label.empty() ? "req " + std::to_string(s.id) : r.label;
  rt->reasoning = r.reasoning;
  rt->sampler = std::make_unique<Sampler>(r.sampling);
  rt->record_logits = r.record_logits;
  rt->record_prompt_logits = r.record_prompt_logits;
  rt->on_prompt_logits = r.on_prompt_logits;
  rt->submitted = Clock::now();
  RequestRecord* raw = rt.get();
  stories_->on_submit(s, rt->label, counters_.steps, now_ms());
  requests_.emplace(s.id, std::move(rt));
  s.error = request_error(r, model_->config.n_vocab);
  if (!s.error.empty()) {
    finish(*raw, SeqState::Rejected, FinishReason::Rejected);
    return s.id;
  }
  sched_->add(&s);
  return s.id;
}

std::vector<SeqId> Engine::submit_parallel(const Request& r, int n) {
  if (n < 1) throw std::invalid_argument("parallel samples: n must be at least 1");
  snapshot_stale_ = true;
  Request first = r;
  if (first.label.empty()) first.label = "sample";
  const SeqId parent = submit(first);
  std::vector<SeqId> ids = {parent};
  RequestRecord& rt = record(parent);
  if (rt.seq.is_finished() || n == 1) return ids;
  rt.pending_forks = n - 1;
  rt.fork_template = first;
  // The children's ids are reserved now so callers can follow them; the sequences start when
  // the parent's prompt is computed (see fork_children), or end with it if it never gets there.
  for (int i = 1; i < n; ++i) rt.child_ids.push_back(next_id_++);
  ids.insert(ids.end(), rt.child_ids.begin(), rt.child_ids.end());
  return ids;
}

void Engine::cancel(SeqId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  finish(*it->second, SeqState::Cancelled, FinishReason::Cancelled);
  publish_step();
}

bool Engine::has_work() const { return sched_->has_work(); }

bool Engine::step() {
  if (!sched_->has_work()) return false;
  const auto t0 = Clock::now();
  const SchedulerOutput out = sched_->schedule();
  stories_->on_schedule(out, *sched_, counters_.steps + 1, now_ms());  // the step being made
  apply_scheduler_verdicts(out);
  StepBatch batch;
  build_batch(out, *kv_, requests_, batch);
  if (evictor_) evictor_->annotate(out, batch.view);
  counters_.tokens_prefilled += batch.prefilled_tokens;
  const std::vector<float>& logits = forward(out, batch);
  if (kv_setup_.state_slots) kv_setup_.state_slots->commit_checkpoints();  // written: now hits
  sched_->on_step_done(out);
  ++counters_.steps;
  postprocess(out, batch, logits);
  if (evictor_) evictor_->after_step(out);
  sched_->end_step(out);  // the no-KV-cache policy forgets the K/V here
  last_step_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  record_scheduler_events(out);
  publish_step();
  return true;
}

// The scheduler already ended these sequences (never fit, max_model_len): count them once.
void Engine::apply_scheduler_verdicts(const SchedulerOutput& out) {
  for (SeqId id : out.rejected)
    if (auto it = requests_.find(id); it != requests_.end()) count_finished(*it->second);
  for (SeqId id : out.length_capped)
    if (auto it = requests_.find(id); it != requests_.end()) count_finished(*it->second);
  counters_.preemptions += out.preempted.size();
}

const std::vector<float>& Engine::forward(const SchedulerOutput& out, StepBatch& batch) {
  backend_->release_blocks(out.released);  // first: a released block may be a copy's destination now
  backend_->copy_blocks(out.copies);
  if (kv_setup_.state_slots) backend_->copy_state_slots(kv_setup_.state_slots->take_state_copies());
  // One buffer across steps: a fresh zeroed 1 MB vector per decode step (gemma's 262144
  // logits) was an mmap, page faults and a memset every token. The backend writes every row
  // it is asked for. A buffer grown by a prompt-logits prefill is given back once steps need
  // far less.
  const size_t n = batch.view.logits_rows.size() * static_cast<size_t>(model_->config.n_vocab);
  if (logits_.capacity() > 4 * n + (size_t{1} << 20)) logits_ = std::vector<float>();
  logits_.resize(n);
  if (batch.view.n_tokens() > 0) backend_->forward(batch.view, logits_.data());
  return logits_;
}

void Engine::postprocess(const SchedulerOutput& out, const StepBatch& batch, const std::vector<float>& logits) {
  const size_t V = static_cast<size_t>(model_->config.n_vocab);
  const auto now = Clock::now();
  for (size_t c = 0; c < out.chunks.size(); ++c) {
    const ScheduledChunk& ch = out.chunks[c];
    RequestRecord& rt = record(ch.seq->id);
    const auto [row0, n_rows] = batch.chunk_rows[c];
    const int32_t n_prompt_rows = n_rows - (ch.wants_logits ? 1 : 0);
    for (int32_t r = 0; r < n_prompt_rows; ++r) {
      const float* p = logits.data() + static_cast<size_t>(row0 + r) * V;
      if (rt.on_prompt_logits)
        rt.on_prompt_logits(std::span<const float>(p, V));
      else
        rt.prompt_logits.emplace_back(p, p + V);
    }
    if (!ch.wants_logits || rt.seq.is_finished()) continue;
    std::span<const float> lg(logits.data() + static_cast<size_t>(row0 + n_rows - 1) * V, V);
    if (!std::all_of(lg.begin(), lg.end(), [](float x) { return std::isfinite(x); })) {
      // NaN/Inf weights (or an overflow) poison everything after them: stop, and say why,
      // rather than sample garbage.
      rt.seq.error =
          "the model produced non-finite logits (NaN or Inf) at position " + std::to_string(rt.seq.total_len());
      finish(rt, SeqState::Rejected, FinishReason::Rejected);
      continue;
    }
    // Parallel samples fork here, after the shared prompt and before anyone samples, so each
    // child samples its first token from these same logits.
    std::vector<RequestRecord*> samplers = {&rt};
    if (rt.pending_forks > 0 && rt.seq.num_generated() == 0)
      for (RequestRecord* child : fork_children(rt)) samplers.push_back(child);
    for (RequestRecord* sr : samplers) sample_next(*sr, lg, now);
  }
  const double t = std::chrono::duration<double>(now - start_).count();
  rate_window_.emplace_back(t, counters_.tokens_decoded);
  while (rate_window_.size() > 2 && rate_window_.front().first < t - 1.0) rate_window_.pop_front();
}

void Engine::sample_next(RequestRecord& sr, std::span<const float> lg, Clock::time_point now) {
  Sequence& q = sr.seq;
  if (sr.record_logits) sr.logits.emplace_back(lg.begin(), lg.end());
  const TokenId tok = sr.sampler->sample(lg, q.tokens);
  q.tokens.push_back(tok);
  ++counters_.tokens_decoded;
  if (sr.ttft_ms < 0) {
    sr.ttft_ms = std::chrono::duration<double, std::milli>(now - sr.submitted).count();
  } else {
    sr.itl_sum_ms += std::chrono::duration<double, std::milli>(now - sr.last_token).count();
    ++sr.itl_count;
  }
  sr.last_token = now;
  if (callbacks_.on_token) callbacks_.on_token(q.id, tok);
  const bool eos = !q.ignore_eos && ((model_->tokenizer && model_->tokenizer->is_eog(tok)) ||
                                     std::find(q.stop_tokens.begin(), q.stop_tokens.end(), tok) != q.stop_tokens.end());
  if (eos)
    finish(sr, SeqState::Finished, FinishReason::Eos);
  else if (q.num_generated() >= q.max_new_tokens || q.total_len() >= sched_->config().max_model_len)
    finish(sr, SeqState::Finished, FinishReason::Length);
}

void Engine::record_scheduler_events(const SchedulerOutput& out) {
  for (SeqId id : out.preempted) {
    BlockEvent ev;
    ev.step = counters_.steps;
    ev.kind = BlockEventKind::Preempted;
    ev.seq = id;
    recorder_->add_scheduler_event(ev);
  }
  for (const BlockCopy& cp : out.copies) {
    BlockEvent ev;
    ev.step = counters_.steps;
    ev.kind = BlockEventKind::CopiedOnWrite;
    ev.block = cp.dst;
    ev.other = cp.src;
    ev.group = cp.group;
    recorder_->add_scheduler_event(ev);
  }
}

void Engine::run_until_idle() {
  while (step()) {}
}

const Sequence& Engine::sequence(SeqId id) const { return record(id).seq; }
const std::vector<std::vector<float>>& Engine::recorded_logits(SeqId id) const { return record(id).logits; }
const std::vector<std::vector<float>>& Engine::recorded_prompt_logits(SeqId id) const {
  return record(id).prompt_logits;
}

SnapshotPtr Engine::snapshot() const {
  if (snapshot_stale_) publish_snapshot();
  return published_.load();
}

std::vector<BlockEvent> Engine::events_since(uint64_t step) const {
  std::vector<BlockEvent> out;
  for (const BlockEvent& e : recorder_->history())
    if (e.step > step) out.push_back(e);
  return out;
}

void Engine::publish_step() {
  // Prune long-finished sequences so a soak run does not grow without bound.
  constexpr uint64_t kKeepFinishedSteps = 2000;
  std::erase_if(requests_, [&](const auto& kv) {
    return kv.second->seq.is_finished() && counters_.steps > kv.second->finished_step + kKeepFinishedSteps;
  });
  const KvAllocatorCounters c = kv_->allocator_counters();
  counters_.allocations = c.allocations;
  counters_.frees = c.frees;
  counters_.evictions = c.evictions;
  counters_.prefix_queries_tokens = c.prefix_queries_tokens;
  counters_.prefix_hits_tokens = c.prefix_hits_tokens;
  recorder_->record(*kv_, counters_.steps, cfg_.window > 0, [&](SeqId id) {
    auto it = requests_.find(id);
    return it != requests_.end() && it->second->seq.state == SeqState::Running;
  });
  stories_->on_recorded(counters_.steps, *recorder_, *kv_, [&](SeqId id) -> const Sequence* {
    auto it = requests_.find(id);
    return it == requests_.end() ? nullptr : &it->second->seq;
  });
  snapshot_stale_ = true;
  if (cfg_.publish_every_step) publish_snapshot();
}

void Engine::publish_snapshot() const {
  double tokens_per_s = 0;
  if (rate_window_.size() >= 2) {
    const auto& [ta, na] = rate_window_.front();
    const auto& [tb, nb] = rate_window_.back();
    tokens_per_s = tb > ta ? static_cast<double>(nb - na) / (tb - ta) : 0.0;
  }
  const SnapshotSources src{.cfg = cfg_,
                            .model = *model_,
                            .backend = *backend_,
                            .kv = *kv_,
                            .recorder = *recorder_,
                            .requests = requests_,
                            .sliding_window = kv_setup_.sliding_window,
                            .running = static_cast<int32_t>(sched_->running().size()),
                            .waiting = static_cast<int32_t>(sched_->waiting().size()),
                            .counters = counters_,
                            .elapsed_s = std::chrono::duration<double>(Clock::now() - start_).count(),
                            .step_ms = last_step_ms_,
                            .tokens_per_s = tokens_per_s};
  published_.store(build_snapshot(src, recorder_->take_unpublished()));
  snapshot_stale_ = false;
}

}  // namespace kvscope
