#pragma once
// The keys one query sees under a sliding window W (0: all of them) with S attention sinks:
// positions [0, n_sink) then [lo, pos], with lo = pos - W + 1 (at least 0) and n_sink =
// min(S, lo). The one formula the paged kernels, their query tiles and their work planner share.
#include <algorithm>
#include <cstdint>

namespace kvscope {

struct VisibleRange {
  int32_t lo = 0, n_sink = 0, n_vis = 0;
};

inline int32_t window_start(int32_t pos, int32_t window) { return window > 0 ? std::max(0, pos - window + 1) : 0; }

inline VisibleRange visible_range(int32_t pos, int32_t window, int32_t sinks) {
  VisibleRange r;
  r.lo = window_start(pos, window);
  r.n_sink = window > 0 ? std::min(sinks, r.lo) : 0;
  r.n_vis = r.n_sink + (pos - r.lo + 1);
  return r;
}

}  // namespace kvscope
