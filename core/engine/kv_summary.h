#pragma once
// The one-line description of the KV pools an engine runs on (Engine::kv_summary()).
#include <string>

#include "engine/backend.h"
#include "model/model_config.h"

namespace kvscope {

// "KV cache: N blocks = T tokens = X MiB, max concurrency at context C"; with two KV groups
// (the hybrid KV cache) one clause per group ("global N blocks ..., sliding M blocks ...").
std::string describe_kv_pools(const Backend& backend, int32_t max_model_len, int32_t sliding_window,
                              int32_t sliding_blocks_per_seq);
// "; layers 15,16,... read the KV of layers 13,14,... (no KV of their own)" for a model whose
// last layers borrow an earlier layer's KV (gemma4); "" otherwise.
std::string describe_borrowed_kv(const ModelConfig& c);
// "; recurrent state: N slots x B = X MiB (fixed per sequence; prefix caching off)" for a model
// with recurrent layers (slots non-null); "" otherwise.
std::string describe_state_slots(const Backend& backend, const StateSlotManager* slots);

}  // namespace kvscope
