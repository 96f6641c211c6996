#pragma once
// KIVI's residual (KvLayout::kivi_residual) meets the prefix cache. The backend keeps a
// sequence's last `lag` tokens in f16 and quantizes a full block only once that many tokens
// follow it, so a full block may still change until then: it enters the prefix cache only at
// that step, and no other sequence ever finds a block that will still change. The backend
// also drops the residual of a block freed outside the prefix cache: with report_released the
// pool collects those for take_released(). Without KIVI: lag 0 (register as soon as full) and
// nothing collected.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kv/block_pool.h"

namespace kvscope {

class RegisterLag {
 public:
  RegisterLag(int32_t lag, bool report_released) : lag_(lag), report_released_(report_released) {}
  void attach(BlockPool& pool) const { pool.track_releases(report_released_); }

  // Table blocks [first, end) that become registrable when a sequence grows from len to
  // new_len tokens (the ones that now have `lag` tokens after them).
  struct Range {
    int32_t first = 0, end = 0;
  };
  Range registrable(int32_t len, int32_t new_len, int32_t block_size) const {
    return {std::max(0, len - lag_) / block_size, std::max(0, new_len - lag_) / block_size};
  }

  // Blocks freed outside the prefix cache since the last call (empty unless report_released).
  std::vector<BlockRelease> take_released(BlockPool& pool) const {
    std::vector<BlockRelease> out;
    for (BlockId b : pool.take_released()) out.push_back(BlockRelease{b, 0});
    return out;
  }

 private:
  int32_t lag_;
  bool report_released_;
};

}  // namespace kvscope
