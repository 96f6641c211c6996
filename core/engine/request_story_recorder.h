#pragma once
// Builds every request's story (engine/request_story.h) from what the engine already knows at
// its hook points: the submit, the scheduler's verdicts of a step (admissions with their prefix
// hits, waits and why, preemptions with who needed the room), and the block events the recorder
// derived from the allocator (allocations, copies on write, window drops, frees, and the hashes
// entering and leaving the prefix cache, which keep the prefix ledger). Nothing is re-derived
// from a second model of the cache.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_event_recorder.h"
#include "engine/prefix_miss.h"
#include "engine/request_story_log.h"
#include "engine/scheduler.h"

namespace kvscope {

// The prefix cache's shape, for explaining lookups.
struct StoryKvInfo {
  int32_t block_size = 16;
  bool prefix_caching = true;
  std::vector<LookupGroup> groups;  // salt and window per KV group (hit_tokens unused here)
  std::string cache_identity;       // "f32 · model.gguf"
};

class RequestStoryRecorder {
 public:
  using SeqLookup = std::function<const Sequence*(SeqId)>;  // a live sequence, or null
  RequestStoryRecorder(std::shared_ptr<RequestStoryLog> log, StoryKvInfo kv);
  // Writes into another log from now on (one shared with earlier engines).
  void use_log(std::shared_ptr<RequestStoryLog> log);
  const std::shared_ptr<RequestStoryLog>& log() const { return log_; }
  uint64_t engine() const { return engine_; }

  void on_submit(const Sequence& s, const std::string& label, uint64_t step, double ms);
  void on_forked(const Sequence& child, const std::string& label, SeqId parent, uint64_t step, double ms);
  // Right after Scheduler::schedule() of step `step`.
  void on_schedule(const SchedulerOutput& out, const Scheduler& sched, uint64_t step, double ms);
  // `reasoning`: the reply's reasoning, when the request parsed it (its blocks are counted here).
  void on_finished(const Sequence& s, uint64_t step, std::optional<StoryReasoning> reasoning = std::nullopt);
  // After the block-event recorder recorded the step (or a cancel).
  void on_recorded(uint64_t step, const BlockEventRecorder& rec, KvSlotAllocator& kv, const SeqLookup& seq_of);

 private:
  struct PendingAdmission {
    SeqId seq = -1;
    StoryAdmission adm;
    std::vector<TokenId> tokens;  // what the lookup walked
    std::vector<int32_t> group_hits;
    std::unordered_map<SeqId, int32_t> kv_of_live;  // other live requests' computed tokens then
  };
  RequestStory* story(SeqId id) { return log_->live(engine_, id); }
  void note_admission(const AdmissionInfo& a, const Scheduler& sched, uint64_t step, double ms);
  void note_waits(const SchedulerOutput& out, const Scheduler& sched, uint64_t step);
  void note_preemptions(const SchedulerOutput& out, uint64_t step, double ms);
  void explain(PendingAdmission& p, const SeqLookup& seq_of);
  std::vector<PromptCandidate> candidates(const PendingAdmission& p, const SeqLookup& seq_of) const;
  void apply_events(uint64_t step, const BlockEventRecorder& rec);
  void count_release(SeqId seq, bool cached);

  std::shared_ptr<RequestStoryLog> log_;
  StoryKvInfo kv_;
  uint64_t engine_ = 0;
  PrefixLedger ledger_;
  std::vector<PendingAdmission> pending_;
  std::unordered_map<SeqId, double> queued_ms_;      // when it (re)joined the waiting queue
  std::unordered_map<SeqId, size_t> preempted_now_;  // this step's victims -> their preemption entry
  std::vector<SeqId> finished_now_;
  std::vector<EvictionRecord> evictions_;  // scratch
};

}  // namespace kvscope
