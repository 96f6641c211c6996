#pragma once
// vLLM's KV-cache event wire format (vllm/distributed/kv_events.py, as of vLLM 0.33), which
// NVIDIA Dynamo, llm-d and other KV-aware routers consume; SGLang and TensorRT-LLM publish it too.
// One ZMQ message is three frames: topic, an 8-byte big-endian sequence number, and a msgpack
// KVEventBatch = [ts, [event...], data_parallel_rank] (an array: msgspec array_like). Each event
// is a map tagged with "type": BlockStored, BlockRemoved or AllBlocksCleared; fields that equal
// their default are left out (msgspec omit_defaults), the required ones are always written.
// Block hashes are 64-bit integers (vLLM's ExternalBlockHash is bytes | int; the int form is
// what VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES sends). Shared by the publisher here and by any
// reader of other engines' streams, so the decoder also takes vLLM's older array-shaped events
// and bytes hashes.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kvscope::serve {

struct KvBlockStored {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;  // none: the first block of a sequence
  std::vector<int64_t> token_ids;              // every token of the stored blocks, in order
  int32_t block_size = 16;
  std::optional<int64_t> lora_id;
  std::optional<std::string> medium = std::string("GPU");
  std::optional<std::string> lora_name;
  std::optional<int32_t> group_idx;            // KV cache group (hybrid models)
  std::optional<std::string> kv_cache_spec_kind;           // "full_attention", "sliding_window", ...
  std::optional<int32_t> kv_cache_spec_sliding_window;
  bool operator==(const KvBlockStored&) const = default;
};

struct KvBlockRemoved {
  std::vector<uint64_t> block_hashes;
  std::optional<std::string> medium = std::string("GPU");
  std::optional<int32_t> group_idx;
  bool operator==(const KvBlockRemoved&) const = default;
};

struct KvAllBlocksCleared {
  bool operator==(const KvAllBlocksCleared&) const = default;
};

using KvEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

struct KvEventBatch {
  double ts = 0;                               // seconds since the Unix epoch
  std::vector<KvEvent> events;
  std::optional<int32_t> data_parallel_rank;
  bool operator==(const KvEventBatch&) const = default;
};

struct KvEventDecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string encode_kv_event_batch(const KvEventBatch& b);             // the msgpack payload frame
KvEventBatch decode_kv_event_batch(std::string_view payload);         // throws KvEventDecodeError
std::string encode_sequence_number(int64_t seq);                      // the 8-byte big-endian frame
int64_t decode_sequence_number(std::string_view frame);               // throws KvEventDecodeError

}  // namespace kvscope::serve
