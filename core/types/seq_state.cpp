#include "types/seq_state.h"

namespace kvscope {

const char* seq_state_name(SeqState s) {
  switch (s) {
    case SeqState::Waiting:
      return "waiting";
    case SeqState::Running:
      return "running";
    case SeqState::Preempted:
      return "preempted";
    case SeqState::Finished:
      return "finished";
    case SeqState::Cancelled:
      return "cancelled";
    case SeqState::Rejected:
      return "rejected";
  }
  return "unknown";
}

}  // namespace kvscope
