#include "serve/engine_worker.h"

#include <algorithm>
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

struct EngineWorker::Choice {
  std::shared_ptr<RequestChannel> ch;
  int index = 0;
  int logprobs = -1;
  std::vector<std::string> stop;
  Utf8StreamDecoder utf8;
  std::string held;                   // text held back: it may be the start of a stop string
  bool stopped_by_string = false;
  Clock::time_point arrival, last_token;
  bool got_token = false;
};

EngineWorker::EngineWorker(std::unique_ptr<Engine> engine, WorkerLimits limits)
    : engine_(std::move(engine)), tok_(*engine_->model().tokenizer), limits_(limits) {
  kv_summary_ = engine_->kv_summary();
  metrics_.prefill_computed = Histogram(buckets_1_2_5(engine_->config().sched.max_model_len));
  engine_->set_callbacks({[this](SeqId id, TokenId t) { on_token(id, t); }, [this](SeqId id) { on_finished(id); }});
  engine_->snapshot();  // so /metrics has a state before the first request
  thread_ = std::thread([this] { loop(); });
}

EngineWorker::~EngineWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestChannel> EngineWorker::submit(GenerationJob job) {
  const int32_t n = job.n;
  if (in_flight_.fetch_add(n) + n > limits_.max_queued) {
    in_flight_.fetch_sub(n);
    throw ApiError(503, "the server is busy: " + std::to_string(limits_.max_queued) +
                            " sequences are already queued or running; retry later");
  }
  auto ch = std::make_shared<RequestChannel>();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stop_) {
      in_flight_.fetch_sub(n);
      throw ApiError(503, "the server is shutting down");
    }
    inbox_.push_back({std::move(job), ch});
  }
  cv_.notify_all();
  return ch;
}

void EngineWorker::cancel(const std::shared_ptr<RequestChannel>& ch) {
  ch->request_cancel();
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancels_.push_back(ch);
  }
  cv_.notify_all();
}

ServeMetrics EngineWorker::metrics() const {
  std::lock_guard<std::mutex> lk(metrics_mu_);
  ServeMetrics m = metrics_;
  m.active_requests = in_flight_.load();
  return m;
}

void EngineWorker::set_step_observer(std::function<void(const Engine&)> observer) {
  std::lock_guard<std::mutex> lk(mu_);
  observer_ = std::move(observer);
}

void EngineWorker::loop() {
  for (;;) {
    std::vector<Pending> jobs;
    std::vector<std::shared_ptr<RequestChannel>> cancels;
    std::function<void(const Engine&)> observer;
    const bool idle = !engine_->has_work();
    if (idle) check_idle();
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (idle) cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return stop_ || !inbox_.empty() || !cancels_.empty(); });
      if (stop_) break;
      jobs.swap(inbox_);
      cancels.swap(cancels_);
      observer = observer_;
    }
    for (const auto& ch : cancels) {
      auto it = by_channel_.find(ch.get());
      if (it == by_channel_.end()) continue;
      const std::vector<SeqId> ids = it->second;  // on_finished edits the map
      for (SeqId id : ids) engine_->cancel(id);
    }
    for (Pending& p : jobs) {
      if (p.ch->cancel_requested()) {  // gone before it started
        for (int i = 0; i < p.job.n; ++i) {
          ChannelItem f;
          f.kind = ChannelItem::Kind::Finish;
          f.index = i;
          f.finish_reason = "cancelled";
          p.ch->push(std::move(f));
        }
        in_flight_.fetch_sub(p.job.n);
        std::lock_guard<std::mutex> lk(metrics_mu_);
        metrics_.requests_cancelled += static_cast<uint64_t>(p.job.n);
        continue;
      }
      start_job(p);
    }
    bool stepped = !cancels.empty();
    if (engine_->has_work()) {
      engine_->step();
      was_busy_ = stepped = true;
    }
    // Stop strings matched inside the step: end those sequences now, freeing their blocks.
    const std::vector<SeqId> hits = std::exchange(stop_string_hits_, {});
    for (SeqId id : hits) engine_->cancel(id);
    if (!engine_->config().publish_every_step) engine_->snapshot();
    if (observer && (stepped || !hits.empty())) observer(*engine_);
  }
  // Shutting down: end what is still running so every waiting HTTP thread hears back.
  std::vector<SeqId> left;
  for (const auto& [id, c] : choices_) left.push_back(id);
  for (SeqId id : left) engine_->cancel(id);
  std::lock_guard<std::mutex> lk(mu_);
  for (Pending& p : inbox_)
    for (int i = 0; i < p.job.n; ++i) {
      ChannelItem f;
      f.kind = ChannelItem::Kind::Finish;
      f.index = i;
      f.finish_reason = "error";
      f.error = "the server is shutting down";
      p.ch->push(std::move(f));
    }
}

void EngineWorker::start_job(Pending& p) {
  Request r;
  r.prompt = p.job.prompt;
  r.max_new_tokens = p.job.max_tokens;
  r.sampling = p.job.sampling;
  r.ignore_eos = p.job.ignore_eos;
  r.stop_tokens = p.job.stop_tokens;
  r.record_logits = p.job.logprobs >= 0;  // the rows logprobs are computed from
  r.label = "http";
  const std::vector<SeqId> ids = p.job.n == 1 ? std::vector<SeqId>{engine_->submit(r)} : engine_->submit_parallel(r, p.job.n);
  std::vector<SeqId>& mine = by_channel_[p.ch.get()];
  for (size_t i = 0; i < ids.size(); ++i) {
    auto c = std::make_unique<Choice>();
    c->ch = p.ch;
    c->index = static_cast<int>(i);
    c->logprobs = p.job.logprobs;
    c->stop = p.job.stop;
    c->arrival = p.job.arrival;
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

void EngineWorker::on_token(SeqId id, TokenId t) {
  auto it = choices_.find(id);
  if (it == choices_.end()) return;
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
  if (c.stopped_by_string) return;  // its text already ended; the cancel follows the step

  ChannelItem item;
  item.kind = ChannelItem::Kind::Token;
  item.index = c.index;
  item.token = t;
  item.token_text = tok_.token_to_piece(t);
  if (c.logprobs >= 0) {
    const std::vector<float>& row = engine_->recorded_logits(id).back();  // the logits this token was sampled from
    const float mx = *std::max_element(row.begin(), row.end());
    double z = 0;
    for (float x : row) z += std::exp(static_cast<double>(x - mx));
    const float lse = mx + static_cast<float>(std::log(z));
    item.logprob = row[static_cast<size_t>(t)] - lse;
    std::vector<TokenId> order(row.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<TokenId>(i);
    const size_t k = std::min(order.size(), static_cast<size_t>(c.logprobs));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](TokenId a, TokenId b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    for (size_t i = 0; i < k; ++i) item.top.push_back({order[i], tok_.token_to_piece(order[i]), row[order[i]] - lse});
  }
  c.held += c.utf8.push(item.token_text);
  if (!c.stop.empty()) {
    size_t first = std::string::npos;
    for (const std::string& s : c.stop) first = std::min(first, c.held.find(s));
    if (first != std::string::npos) {
      item.text = c.held.substr(0, first);
      c.held.clear();
      c.stopped_by_string = true;
      stop_string_hits_.push_back(id);
    } else {
      // Keep the longest tail that could still grow into a stop string.
      size_t keep = 0;
      for (const std::string& s : c.stop)
        for (size_t len = std::min(s.size() - 1, c.held.size()); len > keep; --len)
          if (c.held.compare(c.held.size() - len, len, s, 0, len) == 0) {
            keep = len;
            break;
          }
      item.text = c.held.substr(0, c.held.size() - keep);
      c.held.erase(0, c.held.size() - keep);
    }
  } else {
    item.text = std::move(c.held);
    c.held.clear();
  }
  c.ch->push(std::move(item));
}

void EngineWorker::on_finished(SeqId id) {
  auto it = choices_.find(id);
  if (it == choices_.end()) return;
  std::unique_ptr<Choice> owned = std::move(it->second);
  choices_.erase(it);
  Choice& c = *owned;
  const Sequence& s = engine_->sequence(id);
  std::string reason, error;
  if (c.stopped_by_string || (s.state == SeqState::Finished && s.finish == FinishReason::Eos)) reason = "stop";
  else if (s.state == SeqState::Finished) reason = "length";
  else if (s.state == SeqState::Cancelled) reason = "cancelled";
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
  {
    std::lock_guard<std::mutex> lk(metrics_mu_);
    if (reason == "cancelled") {
      ++metrics_.requests_cancelled;
    } else if (reason == "error") {
      ++metrics_.requests_rejected;
    } else {
      ++metrics_.finished_by_reason[reason];
      metrics_.e2e.observe(std::chrono::duration<double>(Clock::now() - c.arrival).count());
      metrics_.prefill_computed.observe(static_cast<double>(s.prompt().size() - static_cast<size_t>(s.num_cached_prompt)));
    }
  }
  auto bc = by_channel_.find(c.ch.get());
  if (bc != by_channel_.end()) {
    std::erase(bc->second, id);
    if (bc->second.empty()) by_channel_.erase(bc);
  }
  in_flight_.fetch_sub(1);
  c.ch->push(std::move(f));
}

void EngineWorker::check_idle() {
  if (!was_busy_) return;
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
