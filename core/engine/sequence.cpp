#include "engine/sequence.h"

namespace kvscope {

const char* seq_state_name(SeqState s) {
  switch (s) {
    case SeqState::Waiting: return "waiting";
    case SeqState::Running: return "running";
    case SeqState::Preempted: return "preempted";
    case SeqState::Finished: return "finished";
    case SeqState::Cancelled: return "cancelled";
    case SeqState::Rejected: return "rejected";
  }
  return "unknown";
}

std::vector<TokenId> Sequence::all_tokens() const {
  std::vector<TokenId> all;
  all.reserve(prompt.size() + output.size());
  all.insert(all.end(), prompt.begin(), prompt.end());
  all.insert(all.end(), output.begin(), output.end());
  return all;
}

}  // namespace kvscope
