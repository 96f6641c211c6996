#include "serve/serving_queue.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include "serve/api_error.h"

namespace kvscope::serve {

using Clock = std::chrono::steady_clock;

std::vector<double> buckets_1_2_5(double max) {
  std::vector<double> out;
  for (double mag = 1;; mag *= 10)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * mag > max) return out;
      out.push_back(m * mag);
    }
}

namespace {

// An "error" finish here is always the server's doing (shutting down, engine rebuilt): 503, so
// a client retries instead of taking the request for a bad one.
void push_finish(RequestChannel& ch, int index, const std::string& reason, const std::string& error) {
  ChannelItem f;
  f.kind = ChannelItem::Kind::Finish;
  f.index = index;
  f.finish_reason = reason;
  f.error = error;
  if (reason == "error") f.error_status = 503;
  ch.push(std::move(f));
}

// The logprob of the sampled token and the top-k alternatives, from the logits it was sampled from.
void add_logprobs(ChannelItem& item, const std::vector<float>& row, int k_wanted, const Tokenizer& tok) {
  const float mx = *std::max_element(row.begin(), row.end());
  double z = 0;
  for (float x : row) z += std::exp(static_cast<double>(x - mx));
  const float lse = mx + static_cast<float>(std::log(z));
  item.logprob = row[static_cast<size_t>(item.token)] - lse;
  std::vector<TokenId> order(row.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<TokenId>(i);
  const size_t k = std::min(order.size(), static_cast<size_t>(k_wanted));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](TokenId a, TokenId b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  for (size_t i = 0; i < k; ++i) item.top.push_back({order[i], tok.token_to_piece(order[i]), row[order[i]] - lse});
}

}  // namespace

struct ServingQueue::Choice {
  std::shared_ptr<RequestChannel> ch;
  int index = 0;
  int logprobs = -1;
  std::vector<std::string> stop;
  Utf8StreamDecoder utf8;
  std::string held;  // text held back: it may be the start of a stop string
  bool stopped_by_string = false;
  Clock::time_point arrival, last_token;
  bool got_token = false;
  std::string session;  // for the traffic recording
  ReasoningSetup reasoning;

  // Moves the newly complete text into `item`, holding back a tail that may grow into a stop
  // string; true when a stop string matched (the text ends before it).
  bool take_text(ChannelItem& item) {
    held += utf8.push(item.token_text);
    if (stop.empty()) {
      item.text = std::exchange(held, {});
      return false;
    }
    size_t first = std::string::npos;
    for (const std::string& s : stop) first = std::min(first, held.find(s));
    if (first != std::string::npos) {
      item.text = held.substr(0, first);
      held.clear();
      return stopped_by_string = true;
    }
    size_t keep = 0;  // the longest tail that could still grow into a stop string
    for (const std::string& s : stop)
      for (size_t len = std::min(s.size() - 1, held.size()); len > keep; --len)
        if (held.compare(held.size() - len, len, s, 0, len) == 0) {
          keep = len;
          break;
        }
    item.text = held.substr(0, held.size() - keep);
    held.erase(0, held.size() - keep);
    return false;
  }
};

ServingQueue::ServingQueue(WorkerLimits limits) : limits_(limits) {}

ServingQueue::~ServingQueue() {
  close();
  if (engine_) detach("the server is shutting down");
}

std::shared_ptr<RequestChannel> ServingQueue::submit(GenerationJob job) {
  const int32_t n = job.n;
  if (in_flight_.fetch_add(n) + n > limits_.max_queued) {
    in_flight_.fetch_sub(n);
    throw ApiError(503, "the server is busy: " + std::to_string(limits_.max_queued) +
                            " sequences are already queued or running; retry later");
  }
  auto ch = std::make_shared<RequestChannel>();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) {
      in_flight_.fetch_sub(n);
      throw ApiError(503, "the server is shutting down");
    }
    inbox_.push_back({std::move(job), ch});
    open_[ch.get()] = {ch, n};
  }
  wake();
  return ch;
}

void ServingQueue::cancel(const std::shared_ptr<RequestChannel>& ch) {
  ch->request_cancel();
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(ch);
  }
  wake();
}

void ServingQueue::wake() {
  std::lock_guard<std::mutex> lk(wake_mu_);
  if (wake_) wake_();
}

void ServingQueue::set_wake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lk(wake_mu_);
  wake_ = std::move(wake);
}

ServeMetrics ServingQueue::metrics() const {
  std::lock_guard<std::mutex> lk(metrics_mu_);
  ServeMetrics m = metrics_;
  m.active_requests = in_flight_.load();
  return m;
}

SnapshotPtr ServingQueue::latest_snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  SnapshotPtr s = snapshot_source_ ? snapshot_source_->latest_snapshot() : last_snapshot_;
  return s ? s : std::make_shared<const Snapshot>();
}

void ServingQueue::close() {
  set_wake({});
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return;
  closed_ = true;
  for (Pending& p : inbox_) in_flight_.fetch_sub(p.job.n);
  inbox_.clear();
  // Queued and running requests alike: their HTTP threads must not wait for an engine thread
  // that may never step again. A finish the engine thread sends later is ignored by them.
  for (auto& [raw, open] : open_)
    for (int i = 0; i < open.second; ++i) push_finish(*open.first, i, "error", "the server is shutting down");
  open_.clear();
}

void ServingQueue::attach(Engine& engine) {
  engine_ = &engine;
  {
    std::lock_guard<std::mutex> lk(metrics_mu_);
    if (metrics_.prefill_computed.count() == 0)
      metrics_.prefill_computed = Histogram(buckets_1_2_5(engine.config().sched.max_model_len));
  }
  engine.snapshot();  // so /metrics has a state before the first request
  std::lock_guard<std::mutex> lk(mu_);
  snapshot_source_ = &engine;
}

void ServingQueue::detach(const std::string& why) {
  if (!engine_) return;
  finish_left(why);
  std::lock_guard<std::mutex> lk(mu_);
  last_snapshot_ = engine_->latest_snapshot();
  snapshot_source_ = nullptr;
  engine_ = nullptr;
}

void ServingQueue::finish_left(const std::string& why) {
  // Answer every served request with `why` first and forget it, then cancel its sequences:
  // their finish callbacks then find nothing here (the client hears why, not "cancelled").
  std::vector<SeqId> left;
  for (auto& [id, c] : choices_) {
    left.push_back(id);
    if (recorder_) {
      try {
        const Sequence& s = engine_->sequence(id);
        recorder_->finished(id, s.prompt(), static_cast<int32_t>(s.output().size()), c->session, true);
      } catch (const std::out_of_range&) {
        recorder_->finished(id, {}, 0, c->session, false);  // a parallel sample never forked
      }
    }
    push_finish(*c->ch, c->index, "error", why);
    in_flight_.fetch_sub(1);
    std::lock_guard<std::mutex> lk(mu_);
    open_.erase(c->ch.get());
  }
  {
    std::lock_guard<std::mutex> lk(metrics_mu_);
    metrics_.requests_cancelled += left.size();
  }
  choices_.clear();
  by_channel_.clear();
  stop_string_hits_.clear();
  for (SeqId id : left) {
    try {
      engine_->cancel(id);
    } catch (const std::exception&) {
      // already gone (finished in the same step)
    }
  }
}

bool ServingQueue::intake() {
  if (!engine_) return false;  // the jobs wait for the next engine
  std::vector<Pending> jobs;
  std::vector<std::shared_ptr<RequestChannel>> cancels;
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (const auto& ch : cancels) {
    auto it = by_channel_.find(ch.get());
    if (it == by_channel_.end()) continue;
    const std::vector<SeqId> ids = it->second;  // on_finished edits the map
    for (SeqId id : ids) engine_->cancel(id);
  }
  for (Pending& p : jobs) {
    if (p.ch->cancel_requested())
      refuse_cancelled(p);  // gone before it started
    else
      start_job(p);
  }
  return !jobs.empty() || !cancels.empty();
}

void ServingQueue::refuse_cancelled(Pending& p) {
  for (int i = 0; i < p.job.n; ++i) push_finish(*p.ch, i, "cancelled", "");
  in_flight_.fetch_sub(p.job.n);
  {
    std::lock_guard<std::mutex> lk(mu_);
    open_.erase(p.ch.get());
  }
  std::lock_guard<std::mutex> lk(metrics_mu_);
  metrics_.requests_cancelled += static_cast<uint64_t>(p.job.n);
}

void ServingQueue::start_job(Pending& p) {
  Request r;
  r.prompt = p.job.prompt;
  r.max_new_tokens = p.job.max_tokens;
  r.sampling = p.job.sampling;
  r.ignore_eos = p.job.ignore_eos;
  r.stop_tokens = p.job.stop_tokens;
  r.record_logits = p.job.logprobs >= 0;  // the rows logprobs are computed from
  r.label = "http";
  r.reasoning = p.job.reasoning;  // the request's story counts the reasoning's tokens and blocks
  const std::vector<SeqId> ids =
      p.job.n == 1 ? std::vector<SeqId>{engine_->submit(r)} : engine_->submit_parallel(r, p.job.n);
  std::vector<SeqId>& mine = by_channel_[p.ch.get()];
  for (size_t i = 0; i < ids.size(); ++i) {
    auto c = std::make_unique<Choice>();
    c->ch = p.ch;
    c->index = static_cast<int>(i);
    c->logprobs = p.job.logprobs;
    c->stop = p.job.stop;
    c->arrival = p.job.arrival;
    c->session = p.job.session;
    c->reasoning = p.job.reasoning;
    if (recorder_) recorder_->started(ids[i], p.job.arrival);
    choices_[ids[i]] = std::move(c);
    mine.push_back(ids[i]);
  }
  // A request refused inside submit() finished before it was registered: answer it now.
  for (SeqId id : ids) {
    try {
      if (engine_->sequence(id).is_finished()) on_finished(id);
    } catch (const std::out_of_range&) {
      // a parallel sample not forked yet: it runs or ends with its parent
    }
  }
}

bool ServingQueue::on_token(SeqId id, TokenId t) {
  auto it = choices_.find(id);
  if (it == choices_.end()) return false;
  Choice& c = *it->second;
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lk(metrics_mu_);
    ++metrics_.generation_tokens;
    if (!c.got_token) {
      metrics_.ttft.observe(std::chrono::duration<double>(now - c.arrival).count());
      metrics_.prompt_tokens += engine_->sequence(id).prompt().size();
    } else {
      metrics_.itl.observe(std::chrono::duration<double>(now - c.last_token).count());
    }
  }
  c.got_token = true;
  c.last_token = now;
  if (c.stopped_by_string) return true;  // its text already ended; the cancel follows the step

  const Tokenizer& tok = *engine_->model().tokenizer;
  ChannelItem item;
  item.kind = ChannelItem::Kind::Token;
  item.index = c.index;
  item.token = t;
  item.token_text = reasoning_piece(tok, t, c.reasoning.format);
  if (c.logprobs >= 0) add_logprobs(item, engine_->recorded_logits(id).back(), c.logprobs, tok);
  if (c.take_text(item)) stop_string_hits_.push_back(id);
  c.ch->push(std::move(item));
  return true;
}

bool ServingQueue::on_finished(SeqId id) {
  auto it = choices_.find(id);
  if (it == choices_.end()) return false;
  std::unique_ptr<Choice> owned = std::move(it->second);
  choices_.erase(it);
  Choice& c = *owned;
  const Sequence& s = engine_->sequence(id);
  std::string reason, error;
  if (c.stopped_by_string || (s.state == SeqState::Finished && s.finish == FinishReason::Eos))
    reason = "stop";
  else if (s.state == SeqState::Finished)
    reason = "length";
  else if (s.state == SeqState::Cancelled)
    reason = "cancelled";
  else {
    reason = "error";
    error = s.error.empty() ? "the engine rejected the request" : s.error;
  }
  ChannelItem f;
  f.kind = ChannelItem::Kind::Finish;
  f.index = c.index;
  f.finish_reason = reason;
  f.error = error;
  if (!c.stopped_by_string) f.text = c.held + c.utf8.flush();  // what was held back or incomplete
  f.prompt_tokens = static_cast<int32_t>(s.prompt().size());
  f.completion_tokens = static_cast<int32_t>(s.output().size());
  f.cached_tokens = s.num_cached_prompt;
  if (c.reasoning.on())
    f.reasoning_tokens = reasoning_span(*engine_->model().tokenizer, c.reasoning, s.output()).tokens;
  if (recorder_) recorder_->finished(id, s.prompt(), f.completion_tokens, c.session, s.state != SeqState::Rejected);
  {
    std::lock_guard<std::mutex> lk(metrics_mu_);
    if (reason == "cancelled") {
      ++metrics_.requests_cancelled;
    } else if (reason == "error") {
      ++metrics_.requests_rejected;
    } else {
      ++metrics_.finished_by_reason[reason];
      metrics_.e2e.observe(std::chrono::duration<double>(Clock::now() - c.arrival).count());
      metrics_.prefill_computed.observe(
          static_cast<double>(s.prompt().size() - static_cast<size_t>(s.num_cached_prompt)));
    }
  }
  forget(c, id);
  in_flight_.fetch_sub(1);
  c.ch->push(std::move(f));
  return true;
}

void ServingQueue::forget(Choice& c, SeqId id) {
  auto bc = by_channel_.find(c.ch.get());
  if (bc == by_channel_.end()) return;
  std::erase(bc->second, id);
  if (!bc->second.empty()) return;
  by_channel_.erase(bc);
  std::lock_guard<std::mutex> lk(mu_);
  open_.erase(c.ch.get());
}

bool ServingQueue::after_step() {
  if (!engine_) return false;
  was_busy_ = true;
  // Stop strings matched inside the step: end those sequences now, freeing their blocks.
  const std::vector<SeqId> hits = std::exchange(stop_string_hits_, {});
  for (SeqId id : hits) engine_->cancel(id);
  return !hits.empty();
}

void ServingQueue::on_idle() {
  if (!was_busy_ || !engine_) return;
  was_busy_ = false;
  engine_->snapshot();  // the idle state is what /metrics shows from now on
  // Every request has ended: the KV managers' invariants must hold (no leaked block, counts
  // consistent). Cheap next to a step, and only once per busy period.
  std::string err;
  try {
    engine_->validate_kv();
  } catch (const std::exception& e) {
    err = e.what();
    std::cerr << "kvscope serve: KV cache validation failed: " << err << "\n";
  }
  std::lock_guard<std::mutex> lk(metrics_mu_);
  ++metrics_.kv_validations;
  if (!err.empty()) {
    ++metrics_.kv_validation_failures;
    metrics_.last_validation_error = err;
  }
}

}  // namespace kvscope::serve
