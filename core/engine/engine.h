#pragma once
// The engine step loop: schedule -> run (backend forward) -> postprocess (sample, finish,
// publish a snapshot). Single-threaded by design: the caller (CLI loop or the UI's worker
// thread) calls step(); only the backend uses worker threads inside a step.
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kv/baseline_reserve.h"
#include "kv/contiguous_kv_manager.h"
#include "kv/hybrid_kv_manager.h"
#include "kv/kv_dtype.h"
#include "model/model.h"
#include "telemetry/snapshot.h"
#include "telemetry/snapshot_slot.h"

namespace kvscope {

// The hybrid KV cache (kv/hybrid_kv_manager.h) for models mixing sliding-window and global
// layers: Auto turns it on for such models when the allocator is paged and the backend can
// store several KV groups; On insists (an error when impossible); Off keeps one block table.
enum class HybridKvMode : uint8_t { Auto, On, Off };

struct EngineConfig {
  int32_t block_size = 16;
  int32_t num_blocks = 0;            // when 0, derived from kv_memory_bytes
  int64_t kv_memory_bytes = 64LL << 20;
  KvDtype kv_dtype = KvDtype::F32;
  bool prefix_caching = true;
  int32_t window = 0;
  int32_t sinks = 0;
  SchedulerConfig sched;             // max_model_len 0 -> model's context length
  size_t max_events = 100000;        // bounded block-event history
  // After every step (and cancel) the engine builds a snapshot and publishes it (a swap of a
  // shared_ptr<const>, telemetry/snapshot_slot.h), so a reader on any thread can take the newest one with
  // latest_snapshot() at its own pace without ever blocking or waiting for the engine. Off: a
  // snapshot is built only when the driving thread calls snapshot(); for a consumer that reads
  // far less often than the engine steps and wants none of the per-step copies.
  bool publish_every_step = true;
  // The "traditional" allocator instead of paging: every request reserves max_model_len
  // contiguous slots up front (first-fit). Same scheduler, model and backend: a real measurement.
  bool contiguous_baseline = false;
  // How much the baseline reserves per request (max_model_len, the request's own worst case,
  // or a fixed guess that grows on overflow): kv/baseline_reserve.h.
  BaselineReserve baseline_reserve;
  // Teaching mode: no KV cache at all. After every sampled token the sequence's K/V are thrown
  // away and the whole sequence is recomputed next step, so compute per generated token grows
  // with the length (quadratic in total) instead of staying flat. Prefix caching is off.
  bool no_kv_cache = false;
  HybridKvMode hybrid_kv = HybridKvMode::Auto;
  // Hybrid KV cache only: blocks of the sliding group's pool (0: derived, see
  // kv/hybrid_pool_split.h). num_blocks then counts the global group's blocks; when both are 0
  // kv_memory_bytes is split between the two pools.
  int32_t sliding_num_blocks = 0;
};

struct Request {
  std::vector<TokenId> prompt;       // BOS included as wanted
  int32_t max_new_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;
  // Extra tokens that end the reply like EOS (a chat template's end-of-turn); kept in the output.
  std::vector<TokenId> stop_tokens;
  bool record_logits = false;        // keep the logits of every sampling step (for --logits-out)
  bool record_prompt_logits = false; // keep the logits after every prompt position (perplexity)
  std::string label;
};

struct EngineCallbacks {
  std::function<void(SeqId, TokenId)> on_token;     // called inside step()
  std::function<void(SeqId)> on_finished;
};

class Engine {
 public:
  // Throws std::invalid_argument on a bad config (block size, empty pool...).
  Engine(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend, const EngineConfig& cfg);
  ~Engine();

  SeqId submit(const Request& r);
  // n > 1 parallel samples of one prompt: the prompt is computed once, then the samples fork
  // from it sharing every block (the partly filled last one is copied on write). Returns the
  // n ids (the first is the parent); sample i uses seed + i.
  std::vector<SeqId> submit_parallel(const Request& r, int n);
  void cancel(SeqId id);
  bool step();                        // false when there was nothing to do
  void run_until_idle();
  bool has_work() const;

  const Sequence& sequence(SeqId id) const;
  const std::vector<std::vector<float>>& recorded_logits(SeqId id) const;
  // [prompt position][n_vocab]: row i predicts prompt token i + 1 (record_prompt_logits).
  const std::vector<std::vector<float>>& recorded_prompt_logits(SeqId id) const;
  // The engine's state now: the published snapshot, first brought up to date (built and
  // published) when something changed since, e.g. a submit(), or every step with
  // publish_every_step off. Call it on the thread that drives the engine; the returned snapshot
  // is immutable and may be handed to any thread. Snapshot::events holds the block events since
  // the previous snapshot was built (with publish_every_step: those of its step).
  SnapshotPtr snapshot() const;
  // The newest published snapshot, from any thread, at any time: one pointer copy, so a slow
  // reader never holds up a step and never sees a half-built state.
  SnapshotPtr latest_snapshot() const { return published_.load(); }
  // Block events recorded since the last call (at least the newest max_events), without building a
  // snapshot: for a consumer that must see every event but reads snapshots at its own pace.
  std::vector<BlockEvent> take_new_events() { return std::exchange(new_events_, {}); }
  std::vector<BlockEvent> events_since(uint64_t step) const;
  void set_callbacks(EngineCallbacks cb) { callbacks_ = std::move(cb); }

  const EngineConfig& config() const { return cfg_; }
  const Model& model() const { return *model_; }
  Backend& backend() { return *backend_; }
  const KvSlotAllocator& kv() const { return *kv_; }
  const KvCacheManager* paged_kv() const { return paged_; }             // null in baseline mode; group 0 if hybrid
  const HybridKvManager* hybrid_kv() const { return hybrid_; }         // null unless the hybrid KV cache is on
  void validate_kv() const;           // every KV manager's invariants (both groups when hybrid)
  const ContiguousKvManager* contiguous_kv() const { return contiguous_; }  // null when paged
  // "KV cache: N blocks = T tokens = X MiB, max concurrency at context C"; with the hybrid KV
  // cache one clause per group ("global N blocks ..., sliding M blocks ...").
  std::string kv_summary() const;

 private:
  struct SeqRuntime;
  void postprocess(const SchedulerOutput& out, const std::vector<float>& logits);
  // After every change of state (step, cancel): prune old sequences, refresh the allocator
  // counters, record the block events, publish a snapshot (publish_every_step) or mark the
  // published one stale for snapshot().
  void after_change();
  void build_snapshot() const;  // builds one and publishes it
  void record_block_events();
  // Group g's events from the blocks its pool touched since the last call (paged allocator).
  void diff_touched_blocks(KvCacheManager& m, std::vector<BlockSnap>& prev, int32_t group, std::vector<BlockEvent>& evs);
  void finish(SeqRuntime& rt, SeqState state, FinishReason reason);
  std::vector<BlockId> block_table_of(SeqId id) const;
  void fill_baseline_blocks(std::vector<BlockSnap>& blocks) const;
  void mark_sink_blocks(const std::vector<BlockId>& table, int32_t block_size, std::vector<BlockSnap>& blocks) const;
  void fill_sliding_group_snapshot(Snapshot& S) const;
  // Hybrid: why the model/config cannot use it (empty when it can), and the layers of a group.
  std::string hybrid_unavailable_reason() const;
  std::vector<int32_t> group_layers(bool sliding) const;
  std::vector<SeqRuntime*> fork_children(SeqRuntime& parent);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  EngineConfig cfg_;
  std::unique_ptr<KvSlotAllocator> kv_;
  KvCacheManager* paged_ = nullptr;
  ContiguousKvManager* contiguous_ = nullptr;
  HybridKvManager* hybrid_ = nullptr;
  int32_t sliding_window_ = 0;        // hybrid: the sliding group's window
  int32_t hybrid_sliding_per_seq_ = 1; // hybrid: sliding blocks one decoding sequence holds at most
  std::vector<BlockSnap> prev_sliding_blocks_;
  std::unique_ptr<Scheduler> sched_;
  std::unordered_map<SeqId, std::unique_ptr<SeqRuntime>> seqs_;
  SeqId next_id_ = 1;
  uint64_t arrival_counter_ = 0;
  EngineCounters counters_;
  EngineCallbacks callbacks_;
  std::chrono::steady_clock::time_point start_;
  std::deque<BlockEvent> events_;
  std::vector<BlockSnap> prev_blocks_;  // group 0's block states as of the last recorded events
  std::vector<BlockEvent> scheduler_events_;          // this step's preemptions and copies
  std::vector<BlockEvent> new_events_;                // since the last take_new_events()
  mutable std::vector<BlockEvent> unbuilt_events_;    // since the last built snapshot
  // Running totals of a paged group's block states ([group]), updated with every block that
  // diff_touched_blocks() sees change, so a snapshot needs no pass over the pool.
  struct BlockTally {
    int32_t used = 0, cached = 0;
    int64_t filled = 0;               // slots holding a token, in used blocks
    void add(const BlockSnap& b, int sign);
  };
  BlockTally tally_[2];
  std::vector<uint8_t> scratch_changed_;              // diff_touched_blocks: per block
  std::vector<SeqId> scratch_owner_;
  std::deque<std::pair<double, uint64_t>> rate_window_;  // (time, tokens decoded) for tokens/s
  double last_step_ms_ = 0;
  std::vector<std::pair<int32_t, int32_t>> chunk_rows_;  // per scheduled chunk: first logits row, rows
  mutable SnapshotSlot published_;              // swapped whole; readers on any thread
  mutable bool snapshot_stale_ = true;          // engine thread only
};

}  // namespace kvscope
