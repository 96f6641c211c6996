#pragma once
// Query tiling of prefill attention. Consecutive prompt tokens of one sequence see almost the
// same keys (token p sees [lo(p), p], token p + 1 one more), so a tile of them walks the keys
// once: each chunk of K/V rows is loaded (dequantized) once and every query of the tile whose
// visible range covers rows of the chunk consumes them while they are in L1. Untiled, each
// query re-streams (and re-dequantizes) its whole visible K/V: at 8K positions that is 8K
// passes over megabytes that do not fit in L2.
#include <cstdint>
#include <span>
#include <vector>

namespace kvscope {

struct QueryTile {
  int32_t first = 0;  // the batch's token index of the tile's first query
  int32_t n = 0;      // queries: consecutive tokens of one sequence at consecutive positions
};

// Queries per tile: 16 f32 accumulators of a group of query heads stay in L1 next to a 64-row
// chunk of K/V.
inline constexpr int32_t kQueryTileMax = 16;

// Cuts the batch into tiles of up to max_tile tokens: a tile never spans two sequences or a gap
// in positions. Appends to `out` (cleared first), so a caller can reuse its capacity.
void plan_query_tiles(std::span<const int32_t> seq_index, std::span<const int32_t> positions, int32_t max_tile,
                      std::vector<QueryTile>& out);

}  // namespace kvscope
