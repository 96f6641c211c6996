#pragma once
// Block lifecycle events derived from two consecutive snapshots of the pool: comparing states is
// exact (every transition shows up as a state change) and keeps the KV bookkeeping free of
// telemetry hooks.
#include <cstdint>
#include <string>
#include <vector>

#include "telemetry/snapshot.h"

namespace kvscope {

// The events of one block whose state went from `before` to `after` during `step`, appended to out.
void diff_block(const BlockSnap& before, const BlockSnap& after, BlockId b, uint64_t step,
                std::vector<BlockEvent>& out);
std::vector<BlockEvent> diff_block_events(const std::vector<BlockSnap>& before, const std::vector<BlockSnap>& after,
                                          uint64_t step);
// One plain-language sentence per event, for the teaching captions.
std::string describe_block_event(const BlockEvent& e);

}  // namespace kvscope
