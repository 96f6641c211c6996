#include "run/workload_runner.h"

#include <algorithm>
#include <thread>

#include "workload/workload_tokens.h"

namespace kvscope {

WorkloadRunner::WorkloadRunner(Engine& engine, Workload workload, WorkloadRunnerOptions options)
    : engine_(engine), wl_(std::move(workload)), opt_(std::move(options)) {
  submitted_.assign(wl_.requests.size(), false);
  skipped_why_.resize(wl_.requests.size());
  seq_of_.resize(wl_.requests.size());
  final_.resize(wl_.requests.size());
  metrics_.kv_pool_bytes = engine_.backend().kv_total_bytes();
}

void WorkloadRunner::skip(size_t i, std::string why) {
  submitted_[i] = true;  // done, with no sequence
  skipped_why_[i] = std::move(why);
  if (opt_.hooks.on_skipped) opt_.hooks.on_skipped(wl_.requests[i]);
}

void WorkloadRunner::submit_due() {
  const Tokenizer& tok = *engine_.model().tokenizer;
  for (size_t i = 0; i < wl_.requests.size(); ++i) {
    if (submitted_[i]) continue;
    const WorkloadRequest& r = wl_.requests[i];
    if (static_cast<uint64_t>(r.arrival_step) > step_ || r.arrival_s > elapsed_s()) continue;
    Request req;
    req.max_new_tokens = r.max_new_tokens;
    req.ignore_eos = r.ignore_eos;
    req.label = r.id;
    if (r.sampling) req.sampling = *r.sampling;
    try {
      if (r.is_follow_up_turn()) {
        // Waits for the previous turn of its conversation to finish, then continues it.
        auto it = last_turn_.find(r.conversation);
        if (it == last_turn_.end()) continue;
        const std::optional<RequestResult>& prev = final_[it->second];
        if (!prev) continue;                      // the previous turn is still running
        if (prev->state != SeqState::Finished) {  // the conversation broke off: this turn cannot run
          skip(i, "its conversation's previous turn did not finish");
          continue;
        }
        std::vector<TokenId> history = prev->prompt;
        history.insert(history.end(), prev->tokens.begin(), prev->tokens.end());
        if (!history.empty() && tok.is_eog(history.back())) history.pop_back();
        req.prompt = build_turn_prompt(history, r, tok);
      } else {
        req.prompt = workload_prompt_ids(r, tok);
      }
    } catch (const std::exception& e) {
      // A prompt id outside the vocabulary: the caller hears the error; a caller that goes on
      // stepping does not meet this request again.
      skip(i, e.what());
      throw;
    }
    seq_of_[i] = r.n > 1 ? engine_.submit_parallel(req, r.n) : std::vector<SeqId>{engine_.submit(req)};
    submitted_[i] = true;
    if (!r.conversation.empty()) last_turn_[r.conversation] = i;
    if (opt_.hooks.on_submitted) opt_.hooks.on_submitted(r, req, seq_of_[i]);
  }
}

void WorkloadRunner::drop_pending() {
  for (size_t i = 0; i < wl_.requests.size(); ++i)
    if (!submitted_[i]) skip(i, "dropped before it was submitted");
}

// A request that was submitted but got no sequence (a broken-off conversation) is done too.
static bool request_done(bool submitted, const std::vector<SeqId>& seqs, const std::optional<RequestResult>& final) {
  return submitted && (seqs.empty() || final.has_value());
}

bool WorkloadRunner::done() const {
  for (size_t i = 0; i < wl_.requests.size(); ++i)
    if (!request_done(submitted_[i], seq_of_[i], final_[i])) return false;
  return !engine_.has_work();
}

double WorkloadRunner::progress() const {
  if (wl_.requests.empty()) return 1.0;
  size_t finished = 0;
  for (size_t i = 0; i < wl_.requests.size(); ++i) finished += request_done(submitted_[i], seq_of_[i], final_[i]);
  return static_cast<double>(finished) / static_cast<double>(wl_.requests.size());
}

void WorkloadRunner::harvest(const Snapshot* s) {
  double ttft_sum = 0;
  int n_ttft = 0;
  for (size_t i = 0; i < wl_.requests.size(); ++i) {
    if (!final_[i] && !seq_of_[i].empty() &&
        std::all_of(seq_of_[i].begin(), seq_of_[i].end(), [&](SeqId id) { return engine_.sequence(id).is_finished(); }))
      final_[i] = result_from_engine(i, s);
    if (final_[i] && final_[i]->ttft_ms >= 0) ttft_sum += final_[i]->ttft_ms, ++n_ttft;
  }
  if (n_ttft) metrics_.mean_ttft_ms = ttft_sum / n_ttft;  // over every finished request so far
}

bool WorkloadRunner::step() {
  if (!started_) {
    start_ = std::chrono::steady_clock::now();
    started_ = true;
  }
  submit_due();
  if (done()) return false;
  if (!engine_.step()) {
    // Nothing runnable now: requests are still to arrive. One whose step has come but whose
    // time has not is waited for (in slices, so the caller stays responsive); otherwise the
    // step clock moves on.
    double next_s = -1;
    for (size_t i = 0; i < wl_.requests.size(); ++i) {
      const WorkloadRequest& r = wl_.requests[i];
      if (!submitted_[i] && static_cast<uint64_t>(r.arrival_step) <= step_ && (next_s < 0 || r.arrival_s < next_s))
        next_s = r.arrival_s;
    }
    if (const double wait = next_s - elapsed_s(); wait > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, opt_.max_wait_s)));
      return true;
    }
    // Every request still to come arrives at a later step: move the step clock straight to the
    // earliest of them instead of taking the empty steps in between one call at a time (the
    // same submissions at the same step counts, without a slow-motion driver crawling there).
    uint64_t next_step = step_ + 1;
    bool any = false;
    for (size_t i = 0; i < wl_.requests.size(); ++i) {
      if (submitted_[i]) continue;
      const uint64_t at = std::max(step_ + 1, static_cast<uint64_t>(wl_.requests[i].arrival_step));
      next_step = any ? std::min(next_step, at) : at;
      any = true;
    }
    step_ = next_step;
    harvest(nullptr);  // requests rejected at submission finish without a step
    return true;
  }
  ++step_;
  const SnapshotPtr snap = engine_.snapshot();
  observe(*snap);
  harvest(snap.get());
  return true;
}

double WorkloadRunner::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void WorkloadRunner::run_to_completion(const std::atomic<bool>* stop) {
  while ((!stop || !stop->load()) && step()) {}
}

void WorkloadRunner::observe(const Snapshot& s) {
  RunMetrics& m = metrics_;
  m.steps = step_;
  m.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  m.slots_filled += s.memory.slots_filled;
  m.slots_reserved += s.memory.slots_reserved;
  m.peak_slots_filled = std::max(m.peak_slots_filled, s.memory.slots_filled);
  m.peak_slots_reserved = std::max(m.peak_slots_reserved, s.memory.slots_reserved);
  m.waste_pct = m.slots_reserved > 0
                    ? 100.0 * (1.0 - static_cast<double>(m.slots_filled) / static_cast<double>(m.slots_reserved))
                    : 0.0;
  m.peak_waste_pct = std::max(m.peak_waste_pct, s.memory.waste_pct);
  m.external_fragmentation = std::max(m.external_fragmentation, s.allocator.external_fragmentation);
  if (s.memory.slots_reserved > peak_reserved_slots_) {
    peak_reserved_slots_ = s.memory.slots_reserved;
    // Plus the used blocks of the hybrid KV cache's other groups (0 for a single group).
    const int64_t other_groups =
        s.memory.kv_used_bytes - static_cast<int64_t>(s.memory.blocks_used) * s.memory.kv_bytes_per_block;
    m.peak_kv_bytes = s.memory.slots_reserved * s.memory.kv_bytes_per_token + std::max<int64_t>(0, other_groups);
    m.largest_free_run = s.allocator.largest_free_run;
    m.total_free_at_peak = s.allocator.total_free;
  }
  m.peak_blocks_used = std::max(m.peak_blocks_used, s.memory.blocks_used);
  m.max_concurrent = std::max(m.max_concurrent, s.running);
  m.preemptions = s.counters.preemptions;
  m.rejected = s.counters.requests_rejected;
  m.generated_tokens = s.counters.tokens_decoded;
  m.prefill_tokens = s.counters.tokens_prefilled;
  m.tokens_per_s = m.wall_s > 0 ? static_cast<double>(m.generated_tokens) / m.wall_s : 0.0;
  m.prefix_cache_queries_tokens = s.counters.prefix_queries_tokens;
  m.prefix_cache_hits_tokens = s.counters.prefix_hits_tokens;
  m.evictions = s.counters.evictions;
  m.overflows = s.allocator.overflows;
  m.grown_in_place = s.allocator.grown_in_place;
  m.relocations = s.allocator.relocations;
  m.relocated_slots = s.allocator.relocated_slots;
  m.overflow_preemptions = s.allocator.overflow_preemptions;
  m.blocked_admission_steps = s.allocator.blocked_admission_steps;
  m.blocked_by_fragmentation_steps = s.allocator.blocked_by_fragmentation_steps;
  m.failed_reservations = s.allocator.failed_reservations;
  if (s.state.on) {
    m.state = static_cast<const StatePoolCounts&>(s.state);
    m.peak_checkpoints_held = std::max(m.peak_checkpoints_held, s.state.checkpoints_used);
  }
}

RequestResult WorkloadRunner::result_from_engine(size_t i, const Snapshot* snap) const {
  RequestResult r;
  r.id = wl_.requests[i].id;
  r.seqs = seq_of_[i];
  if (r.seqs.empty()) {
    r.state = SeqState::Rejected;
    r.error = submitted_[i] ? skipped_why_[i] : "never submitted";
    return r;
  }
  const Sequence& s = engine_.sequence(r.seqs.front());
  r.state = s.state;
  r.prompt.assign(s.prompt().begin(), s.prompt().end());
  r.tokens = s.output_tokens();
  r.cached_prompt_tokens = s.num_cached_prompt;
  r.preemptions = s.preemptions;
  r.error = s.error;
  if (snap)
    for (const SeqSnap& q : snap->seqs)
      if (q.id == r.seqs.front()) r.ttft_ms = q.ttft_ms;
  return r;
}

std::vector<RequestResult> WorkloadRunner::results() const {
  std::vector<RequestResult> out;
  const SnapshotPtr snap = engine_.snapshot();
  for (size_t i = 0; i < wl_.requests.size(); ++i)
    out.push_back(final_[i] ? *final_[i] : result_from_engine(i, snap.get()));
  return out;
}

nlohmann::json run_metrics_json(const RunMetrics& m) {
  nlohmann::json j = {{"steps", m.steps},
                      {"wall_s", m.wall_s},
                      {"waste_pct", m.waste_pct},
                      {"slots_reserved", m.slots_reserved},
                      {"slots_filled", m.slots_filled},
                      {"peak_slots_reserved", m.peak_slots_reserved},
                      {"peak_slots_filled", m.peak_slots_filled},
                      {"peak_waste_pct", m.peak_waste_pct},
                      {"largest_free_run", m.largest_free_run},
                      {"total_free_at_peak", m.total_free_at_peak},
                      {"external_fragmentation", m.external_fragmentation},
                      {"peak_kv_bytes", m.peak_kv_bytes},
                      {"peak_blocks_used", m.peak_blocks_used},
                      {"max_concurrent", m.max_concurrent},
                      {"preemptions", m.preemptions},
                      {"rejected", m.rejected},
                      {"generated_tokens", m.generated_tokens},
                      {"prefill_tokens", m.prefill_tokens},
                      {"tokens_per_s", m.tokens_per_s},
                      {"prefix_cache_queries_tokens", m.prefix_cache_queries_tokens},
                      {"prefix_cache_hits_tokens", m.prefix_cache_hits_tokens},
                      {"evictions", m.evictions},
                      {"overflows", m.overflows},
                      {"grown_in_place", m.grown_in_place},
                      {"relocations", m.relocations},
                      {"relocated_slots", m.relocated_slots},
                      {"overflow_preemptions", m.overflow_preemptions},
                      {"blocked_admission_steps", m.blocked_admission_steps},
                      {"blocked_by_fragmentation_steps", m.blocked_by_fragmentation_steps},
                      {"failed_reservations", m.failed_reservations},
                      {"mean_ttft_ms", m.mean_ttft_ms},
                      {"kv_pool_bytes", m.kv_pool_bytes}};
  if (!m.state.on) return j;
  const StatePoolCounts& c = m.state;
  j["state_checkpoints"] = {{"policy", c.checkpoint_policy},
                            {"bytes_each", c.bytes_per_slot},
                            {"capacity", c.checkpoints_total},
                            {"peak_held", m.peak_checkpoints_held},
                            {"peak_bytes", m.peak_checkpoints_held * c.bytes_per_slot},
                            {"saved", c.checkpoints_saved},
                            {"restored", c.checkpoints_restored},
                            {"evicted", c.checkpoints_evicted}};
  return j;
}

nlohmann::json WorkloadRunner::to_json() const {
  nlohmann::json j = run_metrics_json(metrics_);
  nlohmann::json reqs = nlohmann::json::array();
  for (const RequestResult& r : results()) {
    nlohmann::json q = {{"id", r.id},
                        {"state", seq_state_name(r.state)},
                        {"n_prompt", r.prompt.size()},
                        {"tokens", r.tokens},
                        {"cached_prompt_tokens", r.cached_prompt_tokens},
                        {"ttft_ms", r.ttft_ms},
                        {"preemptions", r.preemptions}};
    if (!r.error.empty()) q["error"] = r.error;
    reqs.push_back(std::move(q));
  }
  j["requests"] = std::move(reqs);
  return j;
}

}  // namespace kvscope
