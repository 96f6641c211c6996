#pragma once
// The one-line description of the KV pools an engine runs on (Engine::kv_summary()).
#include <string>

#include "engine/backend.h"

namespace kvscope {

// "KV cache: N blocks = T tokens = X MiB, max concurrency at context C"; with two KV groups
// (the hybrid KV cache) one clause per group ("global N blocks ..., sliding M blocks ...").
std::string describe_kv_pools(const Backend& backend, int32_t max_model_len, int32_t sliding_window,
                              int32_t sliding_blocks_per_seq);

}  // namespace kvscope
