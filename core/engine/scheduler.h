#pragma once
// Continuous batching, vLLM style: a FCFS waiting queue and a running list. Each step the
// scheduler gives every running sequence its next tokens (1 for decode, a chunk for prefill)
// within a token budget, admits waiting sequences while the KV pool can hold their next chunk,
// and, when the pool runs dry, preempts the newest running sequence by recompute (its blocks
// are freed and it goes back to the front of the waiting queue).
// The scheduler talks to the KV cache only through KvSlotAllocator, so the paged KvCacheManager
// and the contiguous baseline (ContiguousKvManager) run the same policy on the same workload.
// Invariant between steps: for every running sequence, kv.seq_len(id) == num_computed.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/scheduler_config.h"
#include "engine/sequence.h"
#include "kv/kv_cache_manager.h"  // BlockCopy, and the usual allocator
#include "kv/kv_slot_allocator.h"

namespace kvscope {

struct ScheduledChunk {
  Sequence* seq;
  int32_t first_pos;  // == seq->num_computed before the step
  int32_t n_tokens;   // tokens of seq->tokens [first_pos, first_pos + n_tokens) to compute
  bool wants_logits;  // the chunk reaches the end of the sequence: sample a token after it
};

// What the story of a request needs from the scheduler's decisions (engine/request_story.h).
struct AdmissionInfo {
  SeqId seq = -1;
  int32_t cached = 0;               // prompt tokens attached from the prefix cache
  std::vector<int32_t> group_hits;  // what each KV group alone would have hit
};
struct PreemptionInfo {
  SeqId victim = -1;
  SeqId by = -1;                                   // the running sequence that needed the blocks
  int32_t tokens_lost = 0;                         // the victim's computed tokens, thrown away
  int32_t blocks_held = 0;                         // its blocks (KV group 0) just before they were released
  int32_t blocks_released = 0;                     // of those, back in the pool (the rest shared with others)
  double used_before_pct = 0, used_after_pct = 0;  // pool usage around the victim's free
};
// Why admission stopped this step with requests still waiting (the head's reason).
enum class AdmissionStop : uint8_t { None, PoolFull, MaxRunning, TokenBudget, AfterPreemption };

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  std::vector<SeqId> preempted;        // this step
  std::vector<SeqId> rejected;         // can never fit; state Rejected with error set
  std::vector<BlockCopy> copies;       // copy-on-write block copies to perform before the forward
  std::vector<BlockRelease> released;  // blocks freed since the last step (KIVI), applied before the copies
  std::vector<SeqId> length_capped;    // reached max_model_len: state Finished, FinishReason::Length
  std::vector<AdmissionInfo> admitted;
  std::vector<PreemptionInfo> preemption_info;  // parallel to preempted
  AdmissionStop admission_stop = AdmissionStop::None;
  int32_t total_tokens() const;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, KvSlotAllocator& kv);
  const SchedulerConfig& config() const { return cfg_; }
  void add(Sequence* seq);  // state Waiting, goes to the back of the queue (not owned)
  // A sequence that is already computed up to num_computed and holds its slots (a fork of a
  // running sequence): joins the running list as the newest.
  void add_running(Sequence* seq);
  SchedulerOutput schedule();  // one step's plan; allocates the slots it schedules
  // After the forward, before sampling: the chunks' K/V are computed.
  void on_step_done(const SchedulerOutput& out);
  // After sampling: the engine appended tokens / finished sequences. Applies
  // recompute_every_token (the no-KV-cache teaching mode) to the sequences that sampled.
  void end_step(const SchedulerOutput& out);
  // The one way a sequence ends (finished, cancelled, rejected): frees its blocks now and sets
  // its final state and reason.
  void finish(Sequence* seq, SeqState state, FinishReason reason);
  // The same with the reason the state implies (Finished keeps a reason already set).
  void finish(Sequence* seq, SeqState state);
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  uint64_t preemptions() const { return preemptions_; }

 private:
  // Recompute later: blocks freed, front of waiting. by: the sequence that needed the room.
  void preempt(Sequence* seq, SeqId by, SchedulerOutput& out);
  void admit_waiting(int32_t& budget, SchedulerOutput& out);
  void reject(Sequence* seq, std::string why, SchedulerOutput& out);
  void remove(Sequence* seq);  // out of running_ and waiting_
  bool try_admit(Sequence* seq, int32_t& budget, SchedulerOutput& out);

  SchedulerConfig cfg_;
  KvSlotAllocator& kv_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order (newest last)
  uint64_t preemptions_ = 0;
  int64_t step_ = 0;           // schedule() calls so far (Sequence::arrival_step)
  uint64_t next_arrival_ = 0;  // Sequence::arrival_order
};

}  // namespace kvscope
