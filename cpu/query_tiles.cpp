#include "cpu/query_tiles.h"

namespace kvscope {

void plan_query_tiles(std::span<const int32_t> seq_index, std::span<const int32_t> positions, int32_t max_tile,
                      std::vector<QueryTile>& out) {
  out.clear();
  const int32_t n = static_cast<int32_t>(positions.size());
  for (int32_t t = 0; t < n;) {
    QueryTile tile{t, 1};
    while (tile.n < max_tile && t + tile.n < n && seq_index[t + tile.n] == seq_index[t] &&
           positions[t + tile.n] == positions[t] + tile.n)
      ++tile.n;
    out.push_back(tile);
    t += tile.n;
  }
}

}  // namespace kvscope
