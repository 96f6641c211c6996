#pragma once
// A request's life-cycle states and why it ended: the vocabulary shared by the scheduler, the
// engine, the snapshots and every reader of them (so telemetry need not include the engine).
#include <cstdint>

namespace kvscope {

enum class SeqState { Waiting, Running, Preempted, Finished, Cancelled, Rejected };
const char* seq_state_name(SeqState s);
inline bool is_final_state(SeqState s) {
  return s == SeqState::Finished || s == SeqState::Cancelled || s == SeqState::Rejected;
}

enum class FinishReason { None, Length, Eos, Cancelled, Rejected };

}  // namespace kvscope
