#include "engine/token_eviction.h"

#include <algorithm>
#include <numeric>

namespace kvscope {

std::vector<int32_t> lowest_scored_rows(std::span<const float> score, std::span<const uint8_t> may_go, int32_t live,
                                        int32_t budget) {
  std::vector<int32_t> cand;
  for (int32_t r = 0; r < static_cast<int32_t>(may_go.size()); ++r)
    if (may_go[static_cast<size_t>(r)]) cand.push_back(r);
  const auto n = static_cast<size_t>(std::clamp(live - budget, 0, static_cast<int32_t>(cand.size())));
  std::stable_sort(cand.begin(), cand.end(),
                   [&](int32_t a, int32_t b) { return score[static_cast<size_t>(a)] < score[static_cast<size_t>(b)]; });
  cand.resize(n);
  std::sort(cand.begin(), cand.end());
  return cand;
}

std::vector<float> max_pool(std::span<const float> score, std::span<const uint8_t> live, int32_t kernel) {
  const auto n = static_cast<int32_t>(score.size());
  std::vector<float> out(score.size(), 0.0f);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t j = std::max(0, i - kernel / 2); j <= std::min(n - 1, i + kernel / 2); ++j)
      if (live[static_cast<size_t>(j)])
        out[static_cast<size_t>(i)] = std::max(out[static_cast<size_t>(i)], score[static_cast<size_t>(j)]);
  return out;
}

TokenEvictor::TokenEvictor(const EvictConfig& cfg, int32_t window, int32_t sinks, KvCacheManager& kv, Backend& backend,
                           std::vector<int32_t> layer_windows)
    : cfg_(cfg), sinks_(sinks), layer_windows_(std::move(layer_windows)), kv_(kv), backend_(backend) {
  if (cfg_.recent < 0 && window > 0) cfg_.recent = window;
  if (cfg_.per_layer()) layer_windows_.resize(static_cast<size_t>(kv_.token_holes().layers()), 0);
}

TokenEvictor::SeqPlan& TokenEvictor::plan(const Sequence& s) {
  auto it = plans_.find(s.id);
  if (it != plans_.end()) return it->second;
  SeqPlan p;
  p.budget = cfg_.budget_for(s.prompt_len);
  p.recent = cfg_.recent_for(p.budget);
  p.select_at = cfg_.select_at > 0 ? std::min(cfg_.select_at, s.prompt_len) : s.prompt_len;
  return plans_.emplace(s.id, p).first->second;
}

bool TokenEvictor::records(const SeqPlan& p, int32_t pos) const {
  if (cfg_.policy == EvictPolicy::H2O) return true;
  return !p.selected && pos < p.select_at && pos >= p.select_at - std::max(1, p.recent);
}

void TokenEvictor::annotate(const SchedulerOutput& out, BatchView& v) {
  for (SeqId id : out.preempted) plans_.erase(id);  // recomputed from scratch: choose again
  v.holes = kv_.token_holes().hole_mask();
  v.layer_holes = kv_.token_holes().layer_hole_mask();
  v.slot_positions = kv_.token_holes().slot_positions();
  v.rows.clear();
  v.record_attention.clear();
  std::vector<uint8_t> rec;
  bool any = false;
  for (const ScheduledChunk& ch : out.chunks) {
    const SeqPlan& p = plan(*ch.seq);
    for (int32_t i = 0; i < ch.n_tokens; ++i) {
      const int32_t pos = ch.first_pos + i;
      v.rows.push_back(kv_.token_holes().cache_row(ch.seq->id, pos));
      rec.push_back(records(p, pos) ? 1 : 0);
      any = any || rec.back();
    }
  }
  if (any) v.record_attention = std::move(rec);  // empty: nothing records, split-KV stays on
}

void TokenEvictor::after_step(const SchedulerOutput& out) {
  for (const ScheduledChunk& ch : out.chunks) {
    const SeqId id = ch.seq->id;
    if (!kv_.has_seq(id)) {  // finished this step
      plans_.erase(id);
      continue;
    }
    SeqPlan& p = plan(*ch.seq);
    const int32_t done = kv_.seq_len(id);
    if (cfg_.policy == EvictPolicy::H2O)
      cfg_.per_layer() ? evict_per_layer(id, p, false) : evict(id, p, false);
    else if (!p.selected && done >= p.select_at) {
      cfg_.per_layer() ? evict_per_layer(id, p, true) : evict(id, p, true);
      p.selected = true;
    }
    maybe_compact(id);
  }
}

// Scores of the live rows (accumulated weight of their slot), which may go (not a sink, not in
// the recent window, in a block only this sequence holds), and the selection.
void TokenEvictor::evict(SeqId id, const SeqPlan& p, bool pool) {
  const int32_t len = kv_.token_holes().cache_rows(id);
  const std::span<const float> mass = backend_.attention_mass();
  std::vector<float> score(static_cast<size_t>(len), 0.0f);
  std::vector<uint8_t> live(static_cast<size_t>(len), 0), may_go(static_cast<size_t>(len), 0);
  int32_t n_live = 0;
  for (int32_t r = 0; r < len; ++r) {
    const int64_t slot = kv_.token_holes().row_slot(id, r);
    if (slot < 0 || kv_.token_holes().hole_mask()[static_cast<size_t>(slot)]) continue;
    live[static_cast<size_t>(r)] = 1;
    ++n_live;
    score[static_cast<size_t>(r)] = mass.empty() ? 0.0f : mass[static_cast<size_t>(slot)];
    may_go[static_cast<size_t>(r)] = r >= sinks_ && r < len - p.recent && kv_.token_holes().row_punchable(id, r);
  }
  if (n_live <= p.budget) return;
  if (pool) score = max_pool(score, live, 7);
  const std::vector<int32_t> rows = lowest_scored_rows(score, may_go, n_live, p.budget);
  if (!rows.empty()) kv_.token_holes().punch_rows(id, rows);
}

// Each layer keeps at most the budget of the rows it can still see (a sliding layer: those in
// its window), choosing by its own weights; then a row every layer has dropped or can never see
// again becomes a hole for all.
void TokenEvictor::evict_per_layer(SeqId id, const SeqPlan& p, bool pool) {
  const int32_t len = kv_.token_holes().cache_rows(id), next_pos = kv_.seq_len(id);
  const size_t n_slots = kv_.token_holes().hole_mask().size();
  const std::span<const float> mass = backend_.layer_attention_mass();
  const std::span<const int32_t> slot_pos = kv_.token_holes().slot_positions();
  std::vector<int64_t> slot(static_cast<size_t>(len));
  std::vector<uint8_t> may_go(static_cast<size_t>(len), 0), gone_everywhere(static_cast<size_t>(len), 1);
  for (int32_t r = 0; r < len; ++r) {
    slot[static_cast<size_t>(r)] = kv_.token_holes().row_slot(id, r);
    may_go[static_cast<size_t>(r)] = r >= sinks_ && r < len - p.recent && kv_.token_holes().row_punchable(id, r);
  }
  std::vector<float> score(static_cast<size_t>(len));
  std::vector<uint8_t> live(static_cast<size_t>(len)), cand(static_cast<size_t>(len));
  for (int32_t l = 0; l < kv_.token_holes().layers(); ++l) {
    const int32_t w = layer_windows_[static_cast<size_t>(l)];
    int32_t n_live = 0;
    for (int32_t r = 0; r < len; ++r) {
      const auto i = static_cast<size_t>(r);
      const bool reachable = slot[i] >= 0 && (w == 0 || slot_pos[static_cast<size_t>(slot[i])] > next_pos - w);
      live[i] = reachable && !kv_.token_holes().row_hidden(id, l, r);
      n_live += live[i];
      cand[i] = live[i] && may_go[i];
      score[i] =
          live[i] && !mass.empty() ? mass[static_cast<size_t>(l) * n_slots + static_cast<size_t>(slot[i])] : 0.0f;
    }
    if (n_live > p.budget) {
      if (pool) score = max_pool(score, live, 7);
      const std::vector<int32_t> rows = lowest_scored_rows(score, cand, n_live, p.budget);
      kv_.token_holes().hide_rows(id, l, rows);
      for (int32_t r : rows) live[static_cast<size_t>(r)] = 0;
    }
    for (int32_t r = 0; r < len; ++r) gone_everywhere[static_cast<size_t>(r)] &= !live[static_cast<size_t>(r)];
  }
  std::vector<int32_t> holes;
  for (int32_t r = 0; r < len; ++r)
    if (gone_everywhere[static_cast<size_t>(r)] && may_go[static_cast<size_t>(r)]) holes.push_back(r);
  if (!holes.empty()) kv_.token_holes().punch_rows(id, holes);
}

void TokenEvictor::maybe_compact(SeqId id) {
  const int32_t bs = kv_.config().block_size;
  const int32_t holes = kv_.token_holes().seq_holes(id), held = kv_.blocks_held(id) * bs;
  if (cfg_.compact_at >= 1.0 || holes < bs || holes <= cfg_.compact_at * held) return;
  kv_.token_holes().compact(id);  // a no-op (no copies) when a block from the first hole on is shared
  backend_.copy_slots(kv_.token_holes().take_pending_slot_copies());
}

}  // namespace kvscope
