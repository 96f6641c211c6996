#pragma once
// Token eviction policies over the paged cache. H2O (Zhang et al. 2023) keeps the tokens with
// the largest attention accumulated over every query so far ("heavy hitters") plus the most
// recent ones; SnapKV (Li et al. 2024) chooses once, after the prompt, by the attention the
// prompt's last `window` queries paid, max-pooled over neighbouring positions. The weights come
// from the real attention kernel (Backend::attention_mass(): exact softmax weights of the
// recorded queries), never from a second computation.
//
// Granularity (EvictConfig::scope): by default one choice per sequence, shared by every layer and
// KV head (weights summed over layers and query heads), so every evicted slot is free at once.
// With scope Layer every layer chooses its own BUDGET tokens by its own weights, as the H2O
// paper does per layer (it also splits heads: a per-head choice would free a slot only when all
// heads of all layers drop it, so we stop at layers). A token one layer dropped is hidden from
// that layer only (TokenHoles::hide_rows, kv/token_holes.h); its slot becomes a hole, and can be freed, once
// every layer has dropped it or, for a model's own sliding-window layers (Gemma 3), can never
// see it again. Memory is then the union of the layers' choices, which eval reports as peak
// kept tokens. Sinks (the first S tokens) and the recent window are never evicted.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "engine/evict_config.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"

namespace kvscope {

// Rows to evict so that at most `budget` of the `live` rows remain: the lowest `score` among
// the rows with may_go[row] set (ties: the older row goes first). Fewer when too few may go.
std::vector<int32_t> lowest_scored_rows(std::span<const float> score, std::span<const uint8_t> may_go, int32_t live,
                                        int32_t budget);
// SnapKV's pooling: out[i] = max of score over [i - k/2, i + k/2] (rows with may_go only).
std::vector<float> max_pool(std::span<const float> score, std::span<const uint8_t> live, int32_t kernel);

class TokenEvictor {
 public:
  // window: the engine's --window, which with eviction is the recent window (unless the
  // policy spec names one); sinks: positions never evicted.
  // layer_windows: each layer's own attention window (0: full attention; Gemma 3's sliding
  // layers: 512), which per-layer eviction needs to know what a layer can still see.
  TokenEvictor(const EvictConfig& cfg, int32_t window, int32_t sinks, KvCacheManager& kv, Backend& backend,
               std::vector<int32_t> layer_windows = {});
  // Before the forward: the hole mask, each token's cache row, and which queries record their
  // attention weights (H2O: all; SnapKV: the observation window, until it has chosen).
  void annotate(const SchedulerOutput& out, BatchView& v);
  // After the forward: evict down to the budget and compact where holes pile up (the slot copies
  // go to the backend at once).
  void after_step(const SchedulerOutput& out);

 private:
  struct SeqPlan {
    int32_t budget = 0, recent = 0, select_at = 0;
    bool selected = false;  // SnapKV chose already
  };
  SeqPlan& plan(const Sequence& s);
  bool records(const SeqPlan& p, int32_t pos) const;
  void evict(SeqId id, const SeqPlan& p, bool pool);
  void evict_per_layer(SeqId id, const SeqPlan& p, bool pool);
  void maybe_compact(SeqId id);

  EvictConfig cfg_;
  int32_t sinks_;
  std::vector<int32_t> layer_windows_;
  KvCacheManager& kv_;
  Backend& backend_;
  std::unordered_map<SeqId, SeqPlan> plans_;
};

}  // namespace kvscope
