#pragma once
// The KV-cache event wire format of vLLM (vllm/distributed/kv_events.py), which SGLang and
// TensorRT-LLM publish too and NVIDIA Dynamo, llm-d and other KV-aware routers consume.
// One ZMQ message is three frames: topic, an 8-byte big-endian sequence number, and a msgpack
// KVEventBatch. One codec for both directions: kvscope's server publishes with it
// (serve/kv_event_publisher), `kvscope-cli attach` reads other engines' streams with it.
//
// The encoder writes what vLLM 0.33 writes: the batch as an array [ts, events, dp_rank?]
// (msgspec array_like), each event a map tagged with "type" (omit_defaults: optional fields
// left out when unset), hashes as unsigned 64-bit integers.
// The decoder takes every generation seen in the wild:
//  - events as tagged maps (vLLM >= 0.11, SGLang 0.5) or positional arrays [tag, fields in
//    declaration order...] (vLLM 0.10 and earlier, array_like=True on the event classes);
//  - the batch as an array or as a map {"ts", "events", "data_parallel_rank"|"attn_dp_rank"};
//  - block hashes as unsigned or signed 64-bit integers or byte digests (vLLM's default
//    sha256 hashes are 32 bytes; any length from 1 to 64 bytes is kept whole);
//  - unknown fields and unknown event types are skipped and counted in KvDecodeStats, so a
//    newer engine's stream still decodes; a known field of the wrong type is an error.
// No container allocates more entries than the payload has bytes (a 2^32-element header is
// an error, not an allocation) and nesting is limited to 32 levels.
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kvscope::kv_events {

// A block hash as the engine sent it: a 64-bit integer (either signedness: SGLang's
// namespaced hashes are int64, vLLM's int form is uint64) or a byte digest. Two integer
// hashes are equal when their 64 bits are (msgpack writes a non-negative int64 as unsigned,
// so signedness cannot be part of identity); a digest never equals an integer.
class BlockHash {
 public:
  BlockHash() = default;
  BlockHash(uint64_t u) : bits_(u) {}  // implicit: the integer form engines use most
  static BlockHash from_signed(int64_t v);
  static BlockHash from_bytes(std::string_view digest);  // throws KvEventDecodeError unless 1..64 bytes

  bool is_bytes() const { return !bytes_.empty(); }
  bool is_negative() const { return negative_; }  // an integer that arrived as a negative int64
  uint64_t bits() const { return bits_; }         // the integer form; for digests their last 8 bytes
  const std::string& bytes() const { return bytes_; }
  // Text for people and JSON keys: decimal (signed when it came negative) or lowercase hex.
  std::string text() const;

  bool operator==(const BlockHash& o) const { return bits_ == o.bits_ && bytes_ == o.bytes_; }
  std::strong_ordering operator<=>(const BlockHash& o) const {
    if (auto c = bits_ <=> o.bits_; c != 0) return c;
    return bytes_ <=> o.bytes_;
  }

 private:
  uint64_t bits_ = 0;
  bool negative_ = false;
  std::string bytes_;
};

struct KvBlockStored {
  std::vector<BlockHash> block_hashes;
  std::optional<BlockHash> parent_block_hash;  // none: the first block of a sequence
  std::vector<int64_t> token_ids;              // every token of the stored blocks, in order
  int32_t block_size = 16;
  std::optional<int64_t> lora_id;
  std::optional<std::string> medium = std::string("GPU");
  std::optional<std::string> lora_name;
  std::optional<int32_t> group_idx;               // KV cache group (hybrid models)
  std::optional<std::string> kv_cache_spec_kind;  // "full_attention", "sliding_window", ...
  std::optional<int32_t> kv_cache_spec_sliding_window;
  bool operator==(const KvBlockStored&) const = default;
};

struct KvBlockRemoved {
  std::vector<BlockHash> block_hashes;
  std::optional<std::string> medium = std::string("GPU");
  std::optional<int32_t> group_idx;
  bool operator==(const KvBlockRemoved&) const = default;
};

struct KvAllBlocksCleared {
  bool operator==(const KvAllBlocksCleared&) const = default;
};

using KvEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

struct KvEventBatch {
  double ts = 0;  // seconds since the Unix epoch
  std::vector<KvEvent> events;
  std::optional<int32_t> data_parallel_rank;  // SGLang calls it attn_dp_rank
  bool operator==(const KvEventBatch&) const = default;
};

// What the decoder skipped because it does not know it (added to, never reset).
struct KvDecodeStats {
  uint64_t ignored_fields = 0;  // map keys or trailing positional fields we do not read
  uint64_t ignored_events = 0;  // events of a type we do not know
};

struct KvEventDecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string encode_kv_event_batch(const KvEventBatch& b);  // the msgpack payload frame
// Throws KvEventDecodeError naming the problem; stats (optional) counts what was skipped.
KvEventBatch decode_kv_event_batch(std::string_view payload, KvDecodeStats* stats = nullptr);
std::string encode_sequence_number(int64_t seq);         // the 8-byte big-endian frame
int64_t decode_sequence_number(std::string_view frame);  // throws KvEventDecodeError

}  // namespace kvscope::kv_events

template <>
struct std::hash<kvscope::kv_events::BlockHash> {
  size_t operator()(const kvscope::kv_events::BlockHash& h) const noexcept {
    return std::hash<uint64_t>()(h.bits()) ^ (h.is_bytes() ? 0x9e3779b97f4a7c15ull : 0);
  }
};
