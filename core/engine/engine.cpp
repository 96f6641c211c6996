#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "telemetry/block_events.h"

namespace kvscope {

using Clock = std::chrono::steady_clock;

struct Engine::SeqRuntime {
  Sequence seq;
  std::string label;
  std::unique_ptr<Sampler> sampler;
  bool record_logits = false;
  std::vector<std::vector<float>> logits;
  Clock::time_point submitted;
  Clock::time_point last_token;
  double ttft_ms = -1;
  double itl_sum_ms = 0;
  int32_t itl_count = 0;
  uint64_t finished_order = 0;  // for pruning old finished sequences
};

static bool valid_block_size(int32_t bs) { return bs == 8 || bs == 16 || bs == 32 || bs == 64 || bs == 128; }

Engine::Engine(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend, const EngineConfig& cfg)
    : model_(std::move(model)), backend_(std::move(backend)), cfg_(cfg), start_(Clock::now()) {
  const ModelConfig& mc = model_->config;
  if (!valid_block_size(cfg_.block_size))
    throw std::invalid_argument("block size " + std::to_string(cfg_.block_size) + " is not one of 8, 16, 32, 64, 128");
  if (cfg_.window < 0 || cfg_.sinks < 0) throw std::invalid_argument("window and sinks must not be negative");
  if (cfg_.sinks > 0 && cfg_.window == 0) throw std::invalid_argument("attention sinks need a sliding window (--window)");
  if (cfg_.sched.max_model_len <= 0) cfg_.sched.max_model_len = mc.n_ctx_train;
  if (cfg_.sched.max_running <= 0) throw std::invalid_argument("max running sequences must be at least 1");
  if (cfg_.sched.max_batched_tokens <= 0) throw std::invalid_argument("max batched tokens must be at least 1");

  KvLayout layout;
  layout.n_layer = mc.n_layer;
  layout.n_head_kv = mc.n_head_kv;
  layout.head_dim = mc.head_dim;
  layout.block_size = cfg_.block_size;
  layout.dtype = cfg_.kv_dtype;
  if (cfg_.num_blocks <= 0) {
    if (cfg_.kv_memory_bytes <= 0) throw std::invalid_argument("KV pool size must be positive (blocks or bytes)");
    cfg_.num_blocks = static_cast<int32_t>(std::min<int64_t>(cfg_.kv_memory_bytes / layout.bytes_per_block(), 1 << 30));
  }
  if (cfg_.num_blocks <= 0)
    throw std::invalid_argument("KV memory budget is smaller than one block (" + std::to_string(layout.bytes_per_block()) +
                                " bytes)");
  layout.num_blocks = cfg_.num_blocks;
  backend_->init_kv(layout, AttentionPolicy{cfg_.window, cfg_.sinks});

  KvCacheConfig kc;
  kc.block_size = cfg_.block_size;
  kc.num_blocks = cfg_.num_blocks;
  kc.prefix_caching = cfg_.prefix_caching;
  kc.sliding_window = cfg_.window;
  kc.sink_tokens = cfg_.sinks;
  // Cached K/V are only valid for the same model and KV dtype.
  kc.hash_salt = std::hash<std::string>{}(model_->file->path() + "|" + kv_dtype_name(cfg_.kv_dtype));
  kv_ = std::make_unique<KvCacheManager>(kc);
  sched_ = std::make_unique<Scheduler>(cfg_.sched, *kv_);
  publish();
}

Engine::~Engine() = default;

std::string Engine::kv_summary() const {
  const KvLayout& L = backend_->kv_layout();
  const int64_t tokens = static_cast<int64_t>(L.num_blocks) * L.block_size;
  char buf[256];
  std::snprintf(buf, sizeof buf, "KV cache: %d blocks = %lld tokens = %.2f MiB (%s, %lld B/token), max concurrency %.2fx at context %d",
                L.num_blocks, static_cast<long long>(tokens), static_cast<double>(L.total_bytes()) / (1 << 20),
                kv_dtype_name(L.dtype), static_cast<long long>(L.bytes_per_token()),
                static_cast<double>(tokens) / cfg_.sched.max_model_len, cfg_.sched.max_model_len);
  return buf;
}

SeqId Engine::submit(const Request& r) {
  auto rt = std::make_unique<SeqRuntime>();
  Sequence& s = rt->seq;
  s.id = next_id_++;
  s.prompt = r.prompt;
  s.max_new_tokens = r.max_new_tokens;
  s.ignore_eos = r.ignore_eos;
  s.sampling = r.sampling;
  s.arrival_step = static_cast<int64_t>(counters_.steps);
  s.arrival_order = arrival_counter_++;
  rt->label = r.label.empty() ? "req " + std::to_string(s.id) : r.label;
  rt->sampler = std::make_unique<Sampler>(r.sampling);
  rt->record_logits = r.record_logits;
  rt->submitted = Clock::now();
  SeqRuntime* raw = rt.get();
  seqs_.emplace(s.id, std::move(rt));

  std::string error;
  if (s.prompt.empty()) error = "empty prompt: at least one token is needed";
  for (TokenId t : s.prompt)
    if (t < 0 || t >= model_->config.n_vocab) {
      error = "token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(model_->config.n_vocab - 1) + ")";
      break;
    }
  if (r.max_new_tokens < 0) error = "max_new_tokens must not be negative";
  if (!error.empty()) {
    s.error = error;
    finish(*raw, SeqState::Rejected, FinishReason::Rejected);
    return s.id;
  }
  sched_->add(&s);
  return s.id;
}

std::vector<SeqId> Engine::submit_parallel(const Request& r, int n) {
  // Each sample is its own sequence; the prefix cache makes the later ones share the prompt's
  // full blocks with the first (the partial last block is recomputed per sample).
  std::vector<SeqId> ids;
  for (int i = 0; i < n; ++i) {
    Request ri = r;
    ri.sampling.seed = r.sampling.seed + static_cast<uint64_t>(i);
    ri.label = (r.label.empty() ? "sample" : r.label) + " #" + std::to_string(i + 1);
    ids.push_back(submit(ri));
  }
  return ids;
}

void Engine::finish(SeqRuntime& rt, SeqState state, FinishReason reason) {
  Sequence& s = rt.seq;
  if (s.is_finished()) return;
  if (state == SeqState::Rejected && s.state == SeqState::Waiting && s.error.empty()) s.error = "rejected";
  sched_->finish(&s, state);
  s.state = state;
  s.finish = reason;
  rt.finished_order = counters_.steps;
  if (state == SeqState::Finished) ++counters_.requests_finished;
  if (state == SeqState::Cancelled) ++counters_.requests_cancelled;
  if (state == SeqState::Rejected) ++counters_.requests_rejected;
  if (callbacks_.on_finished) callbacks_.on_finished(s.id);
}

void Engine::cancel(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  finish(*it->second, SeqState::Cancelled, FinishReason::Cancelled);
  publish();
}

bool Engine::has_work() const { return sched_->has_work(); }

bool Engine::step() {
  if (!sched_->has_work()) return false;
  const auto t0 = Clock::now();
  SchedulerOutput out = sched_->schedule();
  for (SeqId id : out.rejected) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    SeqRuntime& rt = *it->second;
    rt.seq.state = SeqState::Waiting;  // let finish() account for it once
    rt.seq.finish = FinishReason::None;
    finish(rt, SeqState::Rejected, FinishReason::Rejected);
  }
  counters_.preemptions += out.preempted.size();
  backend_->copy_blocks(out.copies);

  BatchView batch;
  std::vector<std::vector<TokenId>> all_tokens;  // keep each chunk's tokens alive
  for (const ScheduledChunk& ch : out.chunks) {
    const Sequence& s = *ch.seq;
    const int32_t si = static_cast<int32_t>(batch.block_tables.size());
    batch.block_tables.push_back(kv_->block_table(s.id));
    const std::vector<TokenId> toks = s.all_tokens();
    for (int32_t i = 0; i < ch.n_tokens; ++i) {
      const int32_t pos = ch.first_pos + i;
      batch.tokens.push_back(toks[static_cast<size_t>(pos)]);
      batch.positions.push_back(pos);
      batch.slot_mapping.push_back(kv_->slot(s.id, pos));
      batch.seq_index.push_back(si);
    }
    if (ch.wants_logits) batch.logits_rows.push_back(batch.n_tokens() - 1);
    // A decode step computes the one token sampled last step; everything else is (re)prefill.
    const bool decode = ch.n_tokens == 1 && ch.first_pos == s.total_len() - 1 &&
                        ch.first_pos >= static_cast<int32_t>(s.prompt.size());
    if (!decode) counters_.tokens_prefilled += static_cast<uint64_t>(ch.n_tokens);
  }
  std::vector<float> logits(batch.logits_rows.size() * static_cast<size_t>(model_->config.n_vocab));
  if (batch.n_tokens() > 0) backend_->forward(batch, logits.data());
  sched_->on_step_done(out);
  ++counters_.steps;
  postprocess(out, logits);
  last_step_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  for (SeqId id : out.preempted) {
    BlockEvent ev;
    ev.step = counters_.steps;
    ev.kind = BlockEventKind::Preempted;
    ev.seq = id;
    events_.push_back(ev);
  }
  for (const BlockCopy& cp : out.copies) {
    BlockEvent ev;
    ev.step = counters_.steps;
    ev.kind = BlockEventKind::CopiedOnWrite;
    ev.block = cp.dst;
    ev.other = cp.src;
    events_.push_back(ev);
  }
  publish();
  return true;
}

void Engine::postprocess(const SchedulerOutput& out, const std::vector<float>& logits) {
  const size_t V = static_cast<size_t>(model_->config.n_vocab);
  size_t row = 0;
  const auto now = Clock::now();
  for (const ScheduledChunk& ch : out.chunks) {
    if (!ch.wants_logits) continue;
    std::span<const float> lg(logits.data() + row * V, V);
    ++row;
    SeqRuntime& rt = *seqs_.at(ch.seq->id);
    Sequence& s = rt.seq;
    if (s.is_finished()) continue;
    if (rt.record_logits) rt.logits.emplace_back(lg.begin(), lg.end());
    const std::vector<TokenId> hist = s.all_tokens();
    const TokenId tok = rt.sampler->sample(lg, hist);
    s.output.push_back(tok);
    ++counters_.tokens_decoded;
    if (rt.ttft_ms < 0) {
      rt.ttft_ms = std::chrono::duration<double, std::milli>(now - rt.submitted).count();
    } else {
      rt.itl_sum_ms += std::chrono::duration<double, std::milli>(now - rt.last_token).count();
      ++rt.itl_count;
    }
    rt.last_token = now;
    if (callbacks_.on_token) callbacks_.on_token(s.id, tok);
    const bool eos = !s.ignore_eos && model_->tokenizer && model_->tokenizer->is_eog(tok);
    if (eos) {
      finish(rt, SeqState::Finished, FinishReason::Eos);
    } else if (static_cast<int32_t>(s.output.size()) >= s.max_new_tokens ||
               s.total_len() >= sched_->config().max_model_len) {
      finish(rt, SeqState::Finished, FinishReason::Length);
    }
  }
  const double t = std::chrono::duration<double>(now - start_).count();
  rate_window_.emplace_back(t, counters_.tokens_decoded);
  while (rate_window_.size() > 2 && rate_window_.front().first < t - 1.0) rate_window_.pop_front();
}

void Engine::run_until_idle() {
  while (step()) {
  }
}

const Sequence& Engine::sequence(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("unknown sequence " + std::to_string(id));
  return it->second->seq;
}

const std::vector<std::vector<float>>& Engine::recorded_logits(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("unknown sequence " + std::to_string(id));
  return it->second->logits;
}

SnapshotPtr Engine::snapshot() const {
  std::lock_guard<std::mutex> lock(snap_mu_);
  return snapshot_;
}

std::vector<BlockEvent> Engine::events_since(uint64_t step) const {
  std::vector<BlockEvent> out;
  for (const BlockEvent& e : events_)
    if (e.step > step) out.push_back(e);
  return out;
}

void Engine::publish() {
  auto snap = std::make_shared<Snapshot>();
  Snapshot& S = *snap;
  const KvLayout& L = backend_->kv_layout();
  S.step = counters_.steps;
  S.elapsed_s = std::chrono::duration<double>(Clock::now() - start_).count();
  S.model = model_->describe();
  S.backend = backend_->name();
  S.block_size = L.block_size;
  S.kv_dtype = kv_dtype_name(L.dtype);
  S.window = cfg_.window;
  S.sinks = cfg_.sinks;
  S.prefix_caching = cfg_.prefix_caching;

  const BlockPool& pool = kv_->pool();
  S.blocks.resize(static_cast<size_t>(pool.num_blocks()));
  for (BlockId b = 0; b < pool.num_blocks(); ++b) {
    const BlockState& st = pool.state(b);
    BlockSnap& bs = S.blocks[static_cast<size_t>(b)];
    bs.ref_count = st.ref_count;
    bs.filled = st.filled;
    bs.hashed = st.hashed;
    bs.hash = st.hash;
    bs.status = st.ref_count > 0 ? BlockStatus::Used : (st.hashed ? BlockStatus::Cached : BlockStatus::Free);
  }
  // Prune long-finished sequences so a soak run does not grow without bound.
  constexpr uint64_t kKeepFinishedSteps = 2000;
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    const Sequence& s = it->second->seq;
    if (s.is_finished() && counters_.steps > it->second->finished_order + kKeepFinishedSteps)
      it = seqs_.erase(it);
    else
      ++it;
  }
  std::vector<SeqId> ids;
  for (const auto& [id, rt] : seqs_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  int64_t filled_slots = 0;
  for (SeqId id : ids) {
    const SeqRuntime& rt = *seqs_.at(id);
    const Sequence& s = rt.seq;
    SeqSnap q;
    q.id = id;
    q.label = rt.label;
    q.state = s.state;
    q.tokens = s.all_tokens();
    q.prompt_len = static_cast<int32_t>(s.prompt.size());
    q.generated = static_cast<int32_t>(s.output.size());
    q.num_computed = s.num_computed;
    q.cached_prompt_tokens = s.num_cached_prompt;
    q.preemptions = s.preemptions;
    q.ttft_ms = rt.ttft_ms;
    q.mean_itl_ms = rt.itl_count ? rt.itl_sum_ms / rt.itl_count : -1;
    q.error = s.error;
    if (kv_->has_seq(id)) {
      auto table = kv_->block_table(id);
      q.block_table.assign(table.begin(), table.end());
      for (size_t lb = 0; lb < q.block_table.size(); ++lb) {
        const BlockId b = q.block_table[lb];
        if (b == kNoBlock) continue;
        BlockSnap& bs = S.blocks[static_cast<size_t>(b)];
        if (bs.owner < 0 || id < bs.owner) bs.owner = id;
        if (cfg_.sinks > 0 && static_cast<int64_t>(lb) * L.block_size < cfg_.sinks) bs.sink = true;
      }
    }
    S.seqs.push_back(std::move(q));
  }
  for (const BlockSnap& bs : S.blocks) {
    if (bs.status == BlockStatus::Used) {
      ++S.memory.blocks_used;
      filled_slots += bs.filled;
    } else if (bs.status == BlockStatus::Cached) {
      ++S.memory.blocks_cached;
    } else {
      ++S.memory.blocks_free;
    }
  }
  S.memory.blocks_total = pool.num_blocks();
  S.memory.weights_bytes = static_cast<int64_t>(model_->weights.total_bytes);
  S.memory.kv_bytes_per_token = L.bytes_per_token();
  S.memory.kv_bytes_per_block = L.bytes_per_block();
  S.memory.slots_reserved = static_cast<int64_t>(S.memory.blocks_used) * L.block_size;
  S.memory.slots_filled = filled_slots;
  S.memory.waste_pct = S.memory.slots_reserved ? 100.0 * (1.0 - static_cast<double>(filled_slots) / S.memory.slots_reserved) : 0.0;

  counters_.allocations = pool.counters().allocations;
  counters_.frees = pool.counters().frees;
  counters_.evictions = pool.counters().evictions;
  counters_.prefix_queries_tokens = kv_->prefix_queries_tokens();
  counters_.prefix_hits_tokens = kv_->prefix_hits_tokens();
  S.counters = counters_;
  S.step_ms = last_step_ms_;
  if (rate_window_.size() >= 2) {
    const auto& a = rate_window_.front();
    const auto& b = rate_window_.back();
    S.tokens_per_s = b.first > a.first ? static_cast<double>(b.second - a.second) / (b.first - a.first) : 0.0;
  }

  // Block events of this step, derived from how each block's state changed.
  std::vector<BlockEvent> evs = diff_block_events(prev_blocks_, S.blocks, counters_.steps);
  for (const BlockEvent& e : events_)
    if (e.step == counters_.steps) evs.push_back(e);
  for (const BlockEvent& e : evs)
    if (e.kind != BlockEventKind::Preempted && e.kind != BlockEventKind::CopiedOnWrite) events_.push_back(e);
  while (events_.size() > cfg_.max_events) events_.pop_front();
  S.events = std::move(evs);
  prev_blocks_ = S.blocks;

  std::lock_guard<std::mutex> lock(snap_mu_);
  snapshot_ = std::move(snap);
}

}  // namespace kvscope
