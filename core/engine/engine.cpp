#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "kv/hybrid_pool_split.h"
#include "telemetry/block_events.h"

namespace kvscope {

using Clock = std::chrono::steady_clock;

struct Engine::SeqRuntime {
  Sequence seq;
  std::string label;
  std::unique_ptr<Sampler> sampler;
  bool record_logits = false;
  bool record_prompt_logits = false;
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<float>> prompt_logits;
  int32_t pending_forks = 0;         // parallel samples still to fork off after the prompt
  std::vector<SeqId> child_ids;      // their ids, reserved at submit time
  Request fork_template;
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
  if (cfg_.no_kv_cache) cfg_.prefix_caching = false;  // nothing may survive a step
  if (cfg_.no_kv_cache && cfg_.contiguous_baseline)
    throw std::invalid_argument("the no-KV-cache teaching mode runs on the paged allocator only");

  KvLayout layout;
  layout.n_layer = mc.n_layer;
  layout.n_head_kv = mc.n_head_kv;
  layout.head_dim = mc.head_dim;
  layout.block_size = cfg_.block_size;
  layout.dtype = cfg_.kv_dtype;
  // Cached K/V are only valid for the same model and KV dtype.
  const uint64_t salt = std::hash<std::string>{}(model_->file->path() + "|" + kv_dtype_name(cfg_.kv_dtype));

  const std::string no_hybrid = hybrid_unavailable_reason();
  if (cfg_.hybrid_kv == HybridKvMode::On && !no_hybrid.empty())
    throw std::invalid_argument("the hybrid KV cache is not available: " + no_hybrid);
  if (cfg_.hybrid_kv != HybridKvMode::Off && no_hybrid.empty()) {
    // Two KV groups: global (full-attention) layers and sliding layers, each with its pool.
    sliding_window_ = cfg_.window > 0 ? std::min(cfg_.window, mc.sliding_window) : mc.sliding_window;
    KvGroupSpec groups[2];
    for (int g = 0; g < 2; ++g) {
      groups[g].layers = group_layers(g == 1);
      groups[g].layout = layout;
      groups[g].layout.n_layer = static_cast<int32_t>(groups[g].layers.size());
    }
    HybridPoolInput in;
    in.budget_bytes = cfg_.kv_memory_bytes;
    in.global_blocks = cfg_.num_blocks;
    in.sliding_blocks = cfg_.sliding_num_blocks;
    in.global_block_bytes = groups[0].layout.bytes_per_block();
    in.sliding_block_bytes = groups[1].layout.bytes_per_block();
    in.block_size = cfg_.block_size;
    in.window = sliding_window_;
    in.sinks = cfg_.sinks;
    in.max_model_len = cfg_.sched.max_model_len;
    in.max_chunk = cfg_.sched.max_batched_tokens;
    in.max_running = cfg_.sched.max_running;
    const HybridPoolSplit split = split_hybrid_pools(in);
    cfg_.num_blocks = split.global_blocks;
    cfg_.sliding_num_blocks = split.sliding_blocks;
    hybrid_sliding_per_seq_ = split.sliding_blocks_per_seq;
    groups[0].layout.num_blocks = split.global_blocks;
    groups[1].layout.num_blocks = split.sliding_blocks;
    backend_->init_kv_groups(groups, AttentionPolicy{cfg_.window, cfg_.sinks});

    KvCacheConfig kc;
    kc.block_size = cfg_.block_size;
    kc.num_blocks = split.global_blocks;
    kc.prefix_caching = cfg_.prefix_caching;
    kc.sliding_window = cfg_.window;
    kc.sink_tokens = cfg_.sinks;
    kc.hash_salt = salt;
    KvCacheConfig ks = kc;
    ks.num_blocks = split.sliding_blocks;
    ks.sliding_window = sliding_window_;
    auto h = std::make_unique<HybridKvManager>(kc, ks);
    hybrid_ = h.get();
    paged_ = &h->group(HybridKvManager::kGlobal);
    kv_ = std::move(h);
    sched_ = std::make_unique<Scheduler>(cfg_.sched, *kv_);
    prev_blocks_.assign(static_cast<size_t>(cfg_.num_blocks), BlockSnap{});
    prev_sliding_blocks_.assign(static_cast<size_t>(cfg_.sliding_num_blocks), BlockSnap{});
    build_snapshot();
    return;
  }
  cfg_.sliding_num_blocks = 0;

  if (cfg_.num_blocks <= 0) {
    if (cfg_.kv_memory_bytes <= 0) throw std::invalid_argument("KV pool size must be positive (blocks or bytes)");
    cfg_.num_blocks = static_cast<int32_t>(std::min<int64_t>(cfg_.kv_memory_bytes / layout.bytes_per_block(), 1 << 30));
  }
  if (cfg_.num_blocks <= 0)
    throw std::invalid_argument("KV memory budget is smaller than one block (" + std::to_string(layout.bytes_per_block()) +
                                " bytes)");
  layout.num_blocks = cfg_.num_blocks;
  backend_->init_kv(layout, AttentionPolicy{cfg_.window, cfg_.sinks});

  if (cfg_.contiguous_baseline) {
    if (cfg_.window > 0) throw std::invalid_argument("the contiguous baseline has no sliding window");
    if (cfg_.baseline_reserve.kind == BaselineReserveKind::Fixed && cfg_.baseline_reserve.fixed_slots <= 0)
      throw std::invalid_argument("the baseline's fixed reservation must be at least 1 slot");
    // Reservations are whole blocks (unit = block size), so every base is block-aligned and the
    // backend can walk a (consecutive) block table exactly as for the paged manager, and K/V
    // copies (forks, relocations) come out as block copies.
    auto c = std::make_unique<ContiguousKvManager>(static_cast<int64_t>(cfg_.num_blocks) * cfg_.block_size,
                                                   cfg_.sched.max_model_len, cfg_.baseline_reserve, cfg_.block_size);
    contiguous_ = c.get();
    kv_ = std::move(c);
  } else {
    KvCacheConfig kc;
    kc.block_size = cfg_.block_size;
    kc.num_blocks = cfg_.num_blocks;
    kc.prefix_caching = cfg_.prefix_caching;
    kc.sliding_window = cfg_.window;
    kc.sink_tokens = cfg_.sinks;
    kc.hash_salt = salt;
    auto m = std::make_unique<KvCacheManager>(kc);
    paged_ = m.get();
    kv_ = std::move(m);
  }
  sched_ = std::make_unique<Scheduler>(cfg_.sched, *kv_);
  prev_blocks_.assign(static_cast<size_t>(cfg_.num_blocks), BlockSnap{});
  build_snapshot();
}

Engine::~Engine() = default;

std::string Engine::hybrid_unavailable_reason() const {
  const ModelConfig& mc = model_->config;
  int32_t n_sliding = 0;
  for (int32_t il = 0; il < mc.n_layer; ++il) n_sliding += mc.layer_is_swa(il) ? 1 : 0;
  if (mc.sliding_window <= 0 || n_sliding == 0 || n_sliding == mc.n_layer)
    return "the model does not mix sliding-window and global attention layers";
  if (cfg_.contiguous_baseline) return "the contiguous baseline keeps one reservation per sequence";
  if (!backend_->supports_kv_groups()) return "the " + backend_->name() + " backend stores one KV group only";
  return {};
}

std::vector<int32_t> Engine::group_layers(bool sliding) const {
  std::vector<int32_t> out;
  for (int32_t il = 0; il < model_->config.n_layer; ++il)
    if (model_->config.layer_is_swa(il) == sliding) out.push_back(il);
  return out;
}

void Engine::validate_kv() const {
  if (hybrid_) hybrid_->validate();
  else if (paged_) paged_->validate();
  else if (contiguous_) contiguous_->validate();
}

std::string Engine::kv_summary() const {
  if (hybrid_) {
    const std::vector<KvLayout> G = backend_->kv_group_layouts();
    // Sequences at full context: each holds every global block but only the window's sliding ones.
    const double global_tokens = static_cast<double>(G[0].num_blocks) * G[0].block_size;
    const double concurrency = std::min(global_tokens / cfg_.sched.max_model_len,
                                        static_cast<double>(G[1].num_blocks) / hybrid_sliding_per_seq_);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "KV cache (hybrid, %s): global %d blocks = %.2f MiB (%d layers, %lld B/token), sliding %d blocks = %.2f MiB "
                  "(%d layers, window %d, %lld B/token); total %.2f MiB, max concurrency %.2fx at context %d",
                  kv_dtype_name(G[0].dtype), G[0].num_blocks, static_cast<double>(G[0].total_bytes()) / (1 << 20), G[0].n_layer,
                  static_cast<long long>(G[0].bytes_per_token()), G[1].num_blocks, static_cast<double>(G[1].total_bytes()) / (1 << 20),
                  G[1].n_layer, sliding_window_, static_cast<long long>(G[1].bytes_per_token()),
                  static_cast<double>(backend_->kv_total_bytes()) / (1 << 20), concurrency, cfg_.sched.max_model_len);
    return buf;
  }
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
  snapshot_stale_ = true;
  auto rt = std::make_unique<SeqRuntime>();
  Sequence& s = rt->seq;
  s.id = next_id_++;
  s.prompt = r.prompt;
  s.max_new_tokens = r.max_new_tokens;
  s.ignore_eos = r.ignore_eos;
  s.stop_tokens = r.stop_tokens;
  s.sampling = r.sampling;
  s.arrival_step = static_cast<int64_t>(counters_.steps);
  s.arrival_order = arrival_counter_++;
  rt->label = r.label.empty() ? "req " + std::to_string(s.id) : r.label;
  rt->sampler = std::make_unique<Sampler>(r.sampling);
  rt->record_logits = r.record_logits;
  rt->record_prompt_logits = r.record_prompt_logits;
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
  if (n < 1) throw std::invalid_argument("parallel samples: n must be at least 1");
  snapshot_stale_ = true;
  Request first = r;
  if (first.label.empty()) first.label = "sample";
  const SeqId parent = submit(first);
  std::vector<SeqId> ids = {parent};
  SeqRuntime& rt = *seqs_.at(parent);
  if (rt.seq.is_finished() || n == 1) return ids;
  rt.pending_forks = n - 1;
  rt.fork_template = first;
  // The children's ids are reserved now so callers can follow them; the sequences start when
  // the parent's prompt is computed (see fork_children), or end with it if it never gets there.
  for (int i = 1; i < n; ++i) rt.child_ids.push_back(next_id_++);
  ids.insert(ids.end(), rt.child_ids.begin(), rt.child_ids.end());
  return ids;
}

std::vector<Engine::SeqRuntime*> Engine::fork_children(SeqRuntime& parent) {
  std::vector<SeqRuntime*> children;
  const int n = parent.pending_forks;
  parent.pending_forks = 0;
  for (int i = 1; i <= n; ++i) {
    auto rt = std::make_unique<SeqRuntime>();
    Sequence& s = rt->seq;
    s.id = parent.child_ids[static_cast<size_t>(i - 1)];
    s.prompt = parent.seq.prompt;
    s.max_new_tokens = parent.seq.max_new_tokens;
    s.ignore_eos = parent.seq.ignore_eos;
    s.stop_tokens = parent.seq.stop_tokens;
    s.sampling = parent.fork_template.sampling;
    s.sampling.seed += static_cast<uint64_t>(i);
    s.num_computed = parent.seq.num_computed;
    rt->label = parent.fork_template.label + " #" + std::to_string(i + 1);
    rt->sampler = std::make_unique<Sampler>(s.sampling);
    rt->record_logits = parent.record_logits;
    rt->submitted = parent.submitted;
    kv_->fork(parent.seq.id, s.id);  // shares every block; the partial last one is copied on write
    sched_->add_running(&s);
    children.push_back(rt.get());
    seqs_.emplace(s.id, std::move(rt));
  }
  parent.label += " #1";
  return children;
}

void Engine::finish(SeqRuntime& rt, SeqState state, FinishReason reason) {
  Sequence& s = rt.seq;
  if (s.is_finished()) return;
  if (state == SeqState::Rejected && s.state == SeqState::Waiting && s.error.empty()) s.error = "rejected";
  sched_->finish(&s, state);
  s.state = state;
  s.finish = reason;
  rt.finished_order = counters_.steps;
  if (rt.pending_forks > 0) {
    // Parallel samples that were never forked end the way their parent did.
    rt.pending_forks = 0;
    for (SeqId cid : rt.child_ids) {
      auto child = std::make_unique<SeqRuntime>();
      child->seq.id = cid;
      child->seq.prompt = s.prompt;
      child->seq.state = state;
      child->seq.finish = reason;
      child->seq.error = s.error.empty() ? "its parallel-sampling parent ended before the prompt was computed" : s.error;
      child->label = rt.fork_template.label;
      child->finished_order = counters_.steps;
      seqs_.emplace(cid, std::move(child));
      if (state == SeqState::Cancelled) ++counters_.requests_cancelled;
      if (state == SeqState::Rejected) ++counters_.requests_rejected;
      if (callbacks_.on_finished) callbacks_.on_finished(cid);
    }
  }
  if (state == SeqState::Finished) ++counters_.requests_finished;
  if (state == SeqState::Cancelled) ++counters_.requests_cancelled;
  if (state == SeqState::Rejected) ++counters_.requests_rejected;
  if (callbacks_.on_finished) callbacks_.on_finished(s.id);
}

void Engine::cancel(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  finish(*it->second, SeqState::Cancelled, FinishReason::Cancelled);
  after_change();
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
  for (SeqId id : out.length_capped) {  // the scheduler already finished it (max_model_len)
    ++counters_.requests_finished;
    if (auto it = seqs_.find(id); it != seqs_.end()) it->second->finished_order = counters_.steps;
    if (callbacks_.on_finished) callbacks_.on_finished(id);
  }
  counters_.preemptions += out.preempted.size();
  backend_->copy_blocks(out.copies);

  BatchView batch;
  std::vector<std::vector<BlockId>> tables;  // alive until the forward is done
  tables.reserve(out.chunks.size());
  chunk_rows_.assign(out.chunks.size(), {0, 0});
  for (size_t c = 0; c < out.chunks.size(); ++c) {
    const ScheduledChunk& ch = out.chunks[c];
    const Sequence& s = *ch.seq;
    const SeqRuntime& rt = *seqs_.at(s.id);
    const int32_t si = static_cast<int32_t>(tables.size());
    tables.push_back(block_table_of(s.id));
    batch.block_tables.push_back(std::span<const BlockId>(tables.back()));
    if (hybrid_) {
      // The sliding group's table lives in its manager, unchanged until the next schedule().
      if (batch.more_groups.empty()) batch.more_groups.resize(1);
      batch.more_groups[0].block_tables.push_back(hybrid_->group(HybridKvManager::kSliding).block_table(s.id));
    }
    const std::vector<TokenId> toks = s.all_tokens();
    const int32_t prompt_len = static_cast<int32_t>(s.prompt.size());
    chunk_rows_[c].first = static_cast<int32_t>(batch.logits_rows.size());
    for (int32_t i = 0; i < ch.n_tokens; ++i) {
      const int32_t pos = ch.first_pos + i;
      batch.tokens.push_back(toks[static_cast<size_t>(pos)]);
      batch.positions.push_back(pos);
      batch.slot_mapping.push_back(kv_->slot(s.id, pos));
      if (hybrid_) batch.more_groups[0].slot_mapping.push_back(hybrid_->slot(HybridKvManager::kSliding, s.id, pos));
      batch.seq_index.push_back(si);
      const bool last = i == ch.n_tokens - 1;
      // Perplexity needs the prediction after every prompt position but the last (whose
      // logits are the sampling row anyway).
      if ((last && ch.wants_logits) || (rt.record_prompt_logits && pos < prompt_len - 1))
        batch.logits_rows.push_back(batch.n_tokens() - 1);
    }
    chunk_rows_[c].second = static_cast<int32_t>(batch.logits_rows.size()) - chunk_rows_[c].first;
    // A decode step computes the one token sampled last step; everything else is (re)prefill.
    const bool decode = ch.n_tokens == 1 && ch.first_pos == s.total_len() - 1 && ch.first_pos >= prompt_len;
    if (!decode) counters_.tokens_prefilled += static_cast<uint64_t>(ch.n_tokens);
  }
  std::vector<float> logits(batch.logits_rows.size() * static_cast<size_t>(model_->config.n_vocab));
  if (batch.n_tokens() > 0) backend_->forward(batch, logits.data());
  sched_->on_step_done(out);
  ++counters_.steps;
  postprocess(out, logits);
  if (cfg_.no_kv_cache)
    for (const ScheduledChunk& ch : out.chunks)
      if (ch.wants_logits && ch.seq->state == SeqState::Running) {
        // Forget every K/V: the next token recomputes the whole sequence. The empty
        // allocation re-registers the sequence with length 0, as the scheduler expects of a
        // running sequence with nothing computed.
        kv_->free(ch.seq->id);
        ch.seq->num_computed = 0;
        const std::vector<TokenId> toks = ch.seq->all_tokens();
        kv_->allocate_slots(ch.seq->id, toks, 0);
      }
  last_step_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  for (SeqId id : out.preempted) {
    BlockEvent ev;
    ev.step = counters_.steps;
    ev.kind = BlockEventKind::Preempted;
    ev.seq = id;
    scheduler_events_.push_back(ev);
  }
  for (const BlockCopy& cp : out.copies) {
    BlockEvent ev;
    ev.step = counters_.steps;
    ev.kind = BlockEventKind::CopiedOnWrite;
    ev.block = cp.dst;
    ev.other = cp.src;
    ev.group = cp.group;
    scheduler_events_.push_back(ev);
  }
  after_change();
  return true;
}

void Engine::postprocess(const SchedulerOutput& out, const std::vector<float>& logits) {
  const size_t V = static_cast<size_t>(model_->config.n_vocab);
  const auto now = Clock::now();
  for (size_t c = 0; c < out.chunks.size(); ++c) {
    const ScheduledChunk& ch = out.chunks[c];
    SeqRuntime& rt = *seqs_.at(ch.seq->id);
    Sequence& s = rt.seq;
    const auto [row0, n_rows] = chunk_rows_[c];
    const int32_t n_prompt_rows = n_rows - (ch.wants_logits ? 1 : 0);
    for (int32_t r = 0; r < n_prompt_rows; ++r) {
      const float* p = logits.data() + static_cast<size_t>(row0 + r) * V;
      rt.prompt_logits.emplace_back(p, p + V);
    }
    if (!ch.wants_logits || s.is_finished()) continue;
    std::span<const float> lg(logits.data() + static_cast<size_t>(row0 + n_rows - 1) * V, V);
    if (!std::all_of(lg.begin(), lg.end(), [](float x) { return std::isfinite(x); })) {
      // NaN/Inf weights (or an overflow) poison everything after them: stop, and say why,
      // rather than sample garbage.
      s.error = "the model produced non-finite logits (NaN or Inf) at position " + std::to_string(s.total_len());
      finish(rt, SeqState::Rejected, FinishReason::Rejected);
      continue;
    }
    // Parallel samples fork here, after the shared prompt and before anyone samples, so each
    // child samples its first token from these same logits.
    std::vector<SeqRuntime*> samplers = {&rt};
    if (rt.pending_forks > 0 && s.output.empty())
      for (SeqRuntime* child : fork_children(rt)) samplers.push_back(child);
    for (SeqRuntime* sr : samplers) {
      Sequence& q = sr->seq;
      if (sr->record_logits) sr->logits.emplace_back(lg.begin(), lg.end());
      const std::vector<TokenId> hist = q.all_tokens();
      const TokenId tok = sr->sampler->sample(lg, hist);
      q.output.push_back(tok);
      ++counters_.tokens_decoded;
      if (sr->ttft_ms < 0) {
        sr->ttft_ms = std::chrono::duration<double, std::milli>(now - sr->submitted).count();
      } else {
        sr->itl_sum_ms += std::chrono::duration<double, std::milli>(now - sr->last_token).count();
        ++sr->itl_count;
      }
      sr->last_token = now;
      if (callbacks_.on_token) callbacks_.on_token(q.id, tok);
      const bool eos = !q.ignore_eos && ((model_->tokenizer && model_->tokenizer->is_eog(tok)) ||
                                         std::find(q.stop_tokens.begin(), q.stop_tokens.end(), tok) != q.stop_tokens.end());
      if (eos) {
        finish(*sr, SeqState::Finished, FinishReason::Eos);
      } else if (static_cast<int32_t>(q.output.size()) >= q.max_new_tokens ||
                 q.total_len() >= sched_->config().max_model_len) {
        finish(*sr, SeqState::Finished, FinishReason::Length);
      }
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

const std::vector<std::vector<float>>& Engine::recorded_prompt_logits(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw std::out_of_range("unknown sequence " + std::to_string(id));
  return it->second->prompt_logits;
}

std::vector<BlockId> Engine::block_table_of(SeqId id) const {
  if (paged_) {
    auto t = paged_->block_table(id);
    return {t.begin(), t.end()};
  }
  // Contiguous: the reservation is a run of consecutive, block-aligned blocks.
  std::vector<BlockId> t;
  const int32_t bs = cfg_.block_size;
  const int32_t len = kv_->seq_len(id);
  if (len == 0) return t;
  const int64_t base_block = kv_->slot(id, 0) / bs;
  for (int32_t b = 0; b * bs < len; ++b) t.push_back(static_cast<BlockId>(base_block + b));
  return t;
}

static BlockSnap block_snap_of(const BlockState& st) {
  BlockSnap x;
  x.ref_count = st.ref_count;
  x.filled = st.filled;
  x.hashed = st.hashed;
  x.hash = st.hash;
  x.status = st.ref_count > 0 ? BlockStatus::Used : (st.hashed ? BlockStatus::Cached : BlockStatus::Free);
  return x;
}

// The contiguous baseline's blocks: a block is used when a reservation covers it, filled by the
// slots written. (The paged pools' block states are kept current by record_block_events().)
void Engine::fill_baseline_blocks(std::vector<BlockSnap>& blocks) const {
  const int32_t bs = cfg_.block_size;
  blocks.assign(static_cast<size_t>(cfg_.num_blocks), BlockSnap{});
  for (const ArenaRange& r : contiguous_->arena().ranges()) {
    if (r.owner == kFreeRange) continue;
    for (int64_t slot = r.start; slot < r.start + r.length; slot += bs) {
      BlockSnap& x = blocks[static_cast<size_t>(slot / bs)];
      x.status = BlockStatus::Used;
      x.ref_count = 1;
      x.owner = r.owner;
      const int64_t filled_here = std::clamp<int64_t>(r.start + r.filled - slot, 0, bs);
      x.filled = static_cast<int32_t>(filled_here);
    }
  }
}

// The hybrid KV cache's groups: metadata for both, blocks of the sliding group (group 0's are
// the snapshot's blocks, as for a single-group model).
void Engine::fill_sliding_group_snapshot(Snapshot& S) const {
  const std::vector<KvLayout> G = backend_->kv_group_layouts();
  const KvCacheManager& sm = hybrid_->group(HybridKvManager::kSliding);
  const BlockPool& pool = sm.pool();
  S.kv_groups.resize(2);
  KvGroupSnap& g0 = S.kv_groups[0];
  g0.name = cfg_.window > 0 ? "global layers (window " + std::to_string(cfg_.window) + ")" : "global layers";
  g0.n_layers = G[0].n_layer;
  g0.window = cfg_.window;
  g0.bytes_per_block = G[0].bytes_per_block();
  g0.blocks_total = S.memory.blocks_total;
  g0.blocks_used = S.memory.blocks_used;
  g0.blocks_cached = S.memory.blocks_cached;
  g0.blocks_free = S.memory.blocks_free;
  KvGroupSnap& g1 = S.kv_groups[1];
  g1.name = "sliding layers (window " + std::to_string(sliding_window_) + ")";
  g1.n_layers = G[1].n_layer;
  g1.window = sliding_window_;
  g1.bytes_per_block = G[1].bytes_per_block();
  // Current, owners included: record_block_events() diffs every block the pool touched.
  g1.blocks = prev_sliding_blocks_;
  for (const SeqSnap& q : S.seqs)
    if (!q.more_block_tables.empty()) mark_sink_blocks(q.more_block_tables[0], G[1].block_size, g1.blocks);
  g1.blocks_total = pool.num_blocks();
  g1.blocks_used = tally_[1].used;
  g1.blocks_cached = tally_[1].cached;
  g1.blocks_free = g1.blocks_total - g1.blocks_used - g1.blocks_cached;
  S.memory.kv_used_bytes += static_cast<int64_t>(g1.blocks_used) * g1.bytes_per_block;
}

SnapshotPtr Engine::snapshot() const {
  if (snapshot_stale_) build_snapshot();
  return published_.load();
}

std::vector<BlockEvent> Engine::events_since(uint64_t step) const {
  std::vector<BlockEvent> out;
  for (const BlockEvent& e : events_)
    if (e.step > step) out.push_back(e);
  return out;
}

void Engine::after_change() {
  // Prune long-finished sequences so a soak run does not grow without bound.
  constexpr uint64_t kKeepFinishedSteps = 2000;
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    const Sequence& s = it->second->seq;
    if (s.is_finished() && counters_.steps > it->second->finished_order + kKeepFinishedSteps)
      it = seqs_.erase(it);
    else
      ++it;
  }
  if (paged_) {
    const BlockPool& pool = paged_->pool();
    counters_.allocations = pool.counters().allocations;
    counters_.frees = pool.counters().frees;
    counters_.evictions = pool.counters().evictions;
    counters_.prefix_queries_tokens = paged_->prefix_queries_tokens();
    counters_.prefix_hits_tokens = paged_->prefix_hits_tokens();
    if (hybrid_) {
      const BlockPool& sp = hybrid_->group(HybridKvManager::kSliding).pool();
      counters_.allocations += sp.counters().allocations;
      counters_.frees += sp.counters().frees;
      counters_.evictions += sp.counters().evictions;
      counters_.prefix_queries_tokens = hybrid_->prefix_queries_tokens();
      counters_.prefix_hits_tokens = hybrid_->prefix_hits_tokens();
    }
  } else if (contiguous_) {  // the baseline allocates whole reservations
    counters_.allocations = contiguous_->arena().reservations();
    counters_.frees = contiguous_->arena().releases();
  }
  record_block_events();
  snapshot_stale_ = true;
  if (cfg_.publish_every_step) build_snapshot();
}

void Engine::diff_touched_blocks(KvCacheManager& m, std::vector<BlockSnap>& prev, int32_t group, std::vector<BlockEvent>& evs) {
  std::vector<BlockId> changed = m.pool().take_changed();
  if (changed.empty()) return;
  std::sort(changed.begin(), changed.end());  // block order, as a whole-pool comparison reports them
  if (scratch_changed_.size() < prev.size()) {
    scratch_changed_.resize(prev.size(), 0);
    scratch_owner_.resize(prev.size(), -1);
  }
  // Owner = the lowest sequence id holding the block. A block changes hands only through a
  // ref or unref, so the blocks the pool touched are the only ones whose owner can differ.
  for (BlockId b : changed) scratch_changed_[static_cast<size_t>(b)] = 1, scratch_owner_[static_cast<size_t>(b)] = -1;
  for (SeqId id : m.sequences())
    for (BlockId b : m.block_table(id)) {
      if (b == kNoBlock || !scratch_changed_[static_cast<size_t>(b)]) continue;
      SeqId& o = scratch_owner_[static_cast<size_t>(b)];
      if (o < 0 || id < o) o = id;
    }
  const size_t first = evs.size();
  for (BlockId b : changed) {
    const size_t i = static_cast<size_t>(b);
    BlockSnap now = block_snap_of(m.pool().state(b));
    now.owner = scratch_owner_[i];
    diff_block(prev[i], now, b, counters_.steps, evs);
    tally_[group].add(prev[i], -1);
    tally_[group].add(now, +1);
    prev[i] = now;
    scratch_changed_[i] = 0;
  }
  for (size_t k = first; k < evs.size(); ++k) evs[k].group = group;
}

// The leading blocks of a table that hold attention-sink positions.
void Engine::mark_sink_blocks(const std::vector<BlockId>& table, int32_t block_size, std::vector<BlockSnap>& blocks) const {
  for (size_t lb = 0; lb < table.size() && static_cast<int64_t>(lb) * block_size < cfg_.sinks; ++lb)
    if (table[lb] != kNoBlock) blocks[static_cast<size_t>(table[lb])].sink = true;
}

void Engine::BlockTally::add(const BlockSnap& b, int sign) {
  if (b.status == BlockStatus::Used) used += sign, filled += sign * b.filled;
  else if (b.status == BlockStatus::Cached) cached += sign;
}

void Engine::record_block_events() {
  std::vector<BlockEvent> evs;
  if (paged_) {
    diff_touched_blocks(*paged_, prev_blocks_, 0, evs);
  } else {
    // The contiguous baseline has no change log: compare every block (one pass, no snapshot).
    std::vector<BlockSnap> now;
    fill_baseline_blocks(now);
    evs = diff_block_events(prev_blocks_, now, counters_.steps);
    prev_blocks_ = std::move(now);
  }
  auto left_window = [&](const BlockEvent& e) {
    if ((e.kind != BlockEventKind::Freed && e.kind != BlockEventKind::Cached) || e.seq < 0) return false;
    auto it = seqs_.find(e.seq);
    return it != seqs_.end() && it->second->seq.state == SeqState::Running;
  };
  // A block released while its sequence keeps running fell out of the sliding window.
  if (cfg_.window > 0)
    for (BlockEvent& e : evs)
      if (left_window(e)) e.kind = BlockEventKind::DroppedOutOfWindow;
  if (hybrid_) {
    // The sliding group: leaving the window is the whole point of the group, so say so.
    const size_t first = evs.size();
    diff_touched_blocks(hybrid_->group(HybridKvManager::kSliding), prev_sliding_blocks_, HybridKvManager::kSliding, evs);
    for (size_t k = first; k < evs.size(); ++k)
      if (left_window(evs[k])) evs[k].kind = BlockEventKind::DroppedOutOfWindow;
  }
  evs.insert(evs.end(), scheduler_events_.begin(), scheduler_events_.end());  // preemptions, copies
  scheduler_events_.clear();
  for (const BlockEvent& e : evs) events_.push_back(e);
  while (events_.size() > cfg_.max_events) events_.pop_front();
  // Nobody read them for a long time: keep the newest max_events (trimmed in bulk, so a CLI
  // run that never reads them pays O(1) per event).
  auto append_bounded = [&](std::vector<BlockEvent>& to) {
    to.insert(to.end(), evs.begin(), evs.end());
    if (to.size() > 2 * cfg_.max_events) to.erase(to.begin(), to.end() - static_cast<std::ptrdiff_t>(cfg_.max_events));
  };
  append_bounded(unbuilt_events_);
  append_bounded(new_events_);
}

void Engine::build_snapshot() const {
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

  // Paged: record_block_events() has just brought prev_blocks_ up to date for every block the
  // pool touched (the only ones that can differ), so copying it is the whole pool's state for
  // the price of a memcpy, where asking the pool block by block cost a pass over all of them.
  if (paged_) S.blocks = prev_blocks_;
  else fill_baseline_blocks(S.blocks);
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
      q.block_table = block_table_of(id);  // the blocks' owners are already in S.blocks
      mark_sink_blocks(q.block_table, L.block_size, S.blocks);
      if (hybrid_) {
        const auto t = hybrid_->group(HybridKvManager::kSliding).block_table(id);
        q.more_block_tables.emplace_back(t.begin(), t.end());
      }
    }
    S.seqs.push_back(std::move(q));
  }
  BlockTally t = tally_[0];
  if (!paged_) {  // the baseline's blocks come from its arena, with no change log to tally
    t = {};
    for (const BlockSnap& bs : S.blocks) t.add(bs, +1);
  }
  S.memory.blocks_total = static_cast<int32_t>(S.blocks.size());
  S.memory.blocks_used = t.used;
  S.memory.blocks_cached = t.cached;
  S.memory.blocks_free = S.memory.blocks_total - t.used - t.cached;
  filled_slots = t.filled;
  S.memory.weights_bytes = static_cast<int64_t>(model_->weights.total_bytes);
  S.memory.kv_bytes_per_token = L.bytes_per_token();
  S.memory.kv_bytes_per_block = L.bytes_per_block();
  S.memory.slots_reserved = static_cast<int64_t>(S.memory.blocks_used) * L.block_size;
  S.memory.slots_filled = filled_slots;
  S.memory.waste_pct = S.memory.slots_reserved ? 100.0 * (1.0 - static_cast<double>(filled_slots) / S.memory.slots_reserved) : 0.0;
  S.memory.kv_pool_bytes = backend_->kv_total_bytes();
  S.memory.kv_used_bytes = static_cast<int64_t>(S.memory.blocks_used) * L.bytes_per_block();

  if (paged_) {
    const int64_t free_slots = static_cast<int64_t>(S.memory.blocks_free + S.memory.blocks_cached) * L.block_size;
    S.allocator.total_slots = static_cast<int64_t>(S.memory.blocks_total) * L.block_size;
    S.allocator.total_free = free_slots;
    S.allocator.largest_free_run = free_slots;
    S.allocator.live_allocations = static_cast<int32_t>(paged_->sequences().size());
  } else {
    const ArenaMetrics am = contiguous_->arena().metrics();
    S.allocator.contiguous = true;
    S.allocator.total_slots = am.total_slots;
    S.allocator.total_free = am.total_free;
    S.allocator.largest_free_run = am.largest_free_run;
    S.allocator.external_fragmentation = am.external_fragmentation;
    S.allocator.live_allocations = am.live_allocations;
    const BaselineCounters& bc = contiguous_->counters();
    S.allocator.reserve_policy = baseline_reserve_name(contiguous_->policy());
    S.allocator.overflows = bc.overflows;
    S.allocator.grown_in_place = bc.grown_in_place;
    S.allocator.relocations = bc.relocations;
    S.allocator.relocated_slots = bc.relocated_slots;
    S.allocator.overflow_preemptions = bc.overflow_preemptions;
    S.allocator.blocked_admission_steps = bc.blocked_admission_steps;
    S.allocator.blocked_by_fragmentation_steps = bc.blocked_by_fragmentation_steps;
    S.allocator.failed_reservations = am.failed_reservations;
    for (const ArenaRange& r : contiguous_->arena().ranges()) S.allocator.ranges.push_back({r.start, r.length, r.owner, r.filled});
    // The baseline's waste counts every reserved slot, not just the blocks touched so far.
    S.memory.slots_reserved = am.slots_reserved;
    S.memory.slots_filled = am.slots_filled;
    S.memory.waste_pct = am.waste_pct;
  }
  S.running = static_cast<int32_t>(sched_->running().size());
  S.waiting = static_cast<int32_t>(sched_->waiting().size());
  S.counters = counters_;
  S.step_ms = last_step_ms_;
  if (rate_window_.size() >= 2) {
    const auto& a = rate_window_.front();
    const auto& b = rate_window_.back();
    S.tokens_per_s = b.first > a.first ? static_cast<double>(b.second - a.second) / (b.first - a.first) : 0.0;
  }
  if (hybrid_) fill_sliding_group_snapshot(S);
  S.events = std::move(unbuilt_events_);
  unbuilt_events_.clear();
  snapshot_stale_ = false;
  published_.store(std::move(snap));
}

}  // namespace kvscope
