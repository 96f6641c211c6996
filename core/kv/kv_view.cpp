#include "kv/kv_view.h"

namespace kvscope {

const char* block_status_name(BlockStatus s) {
  switch (s) {
    case BlockStatus::Free:
      return "free";
    case BlockStatus::Used:
      return "used";
    case BlockStatus::Cached:
      return "cached";
  }
  return "?";
}

}  // namespace kvscope
