// The encoder (vLLM 0.33's shape), the sequence-number frame and BlockHash. The decoder,
// which reads every generation, is kv_events_decode.cpp.
#include "kv_events/kv_events_codec.h"

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>

namespace kvscope::kv_events {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_str(Packer& p, std::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void pack_hash(Packer& p, const BlockHash& h) {
  if (h.is_bytes()) {
    p.pack_bin(static_cast<uint32_t>(h.bytes().size()));
    p.pack_bin_body(h.bytes().data(), static_cast<uint32_t>(h.bytes().size()));
  } else if (h.is_negative()) {
    p.pack_int64(static_cast<int64_t>(h.bits()));
  } else {
    p.pack_uint64(h.bits());
  }
}

void pack_hashes(Packer& p, const std::vector<BlockHash>& hs) {
  p.pack_array(static_cast<uint32_t>(hs.size()));
  for (const BlockHash& h : hs) pack_hash(p, h);
}

template <class T>
void pack_opt(Packer& p, const std::optional<T>& v) {
  if (!v) {
    p.pack_nil();
  } else if constexpr (std::is_same_v<T, std::string>) {
    pack_str(p, *v);
  } else if constexpr (std::is_same_v<T, BlockHash>) {
    pack_hash(p, *v);
  } else {
    p.pack(*v);
  }
}

void pack_stored(Packer& p, const KvBlockStored& s) {
  const uint32_t n =
      8 + (s.group_idx ? 1 : 0) + (s.kv_cache_spec_kind ? 1 : 0) + (s.kv_cache_spec_sliding_window ? 1 : 0);
  p.pack_map(n);
  pack_str(p, "type"), pack_str(p, "BlockStored");
  pack_str(p, "block_hashes"), pack_hashes(p, s.block_hashes);
  pack_str(p, "parent_block_hash"), pack_opt(p, s.parent_block_hash);
  pack_str(p, "token_ids"), p.pack(s.token_ids);
  pack_str(p, "block_size"), p.pack(s.block_size);
  pack_str(p, "lora_id"), pack_opt(p, s.lora_id);
  pack_str(p, "medium"), pack_opt(p, s.medium);
  pack_str(p, "lora_name"), pack_opt(p, s.lora_name);
  if (s.group_idx) pack_str(p, "group_idx"), p.pack(*s.group_idx);
  if (s.kv_cache_spec_kind) pack_str(p, "kv_cache_spec_kind"), pack_str(p, *s.kv_cache_spec_kind);
  if (s.kv_cache_spec_sliding_window)
    pack_str(p, "kv_cache_spec_sliding_window"), p.pack(*s.kv_cache_spec_sliding_window);
}

void pack_event(Packer& p, const KvEvent& ev) {
  if (const auto* s = std::get_if<KvBlockStored>(&ev)) {
    pack_stored(p, *s);
  } else if (const auto* r = std::get_if<KvBlockRemoved>(&ev)) {
    p.pack_map(3 + (r->group_idx ? 1 : 0));
    pack_str(p, "type"), pack_str(p, "BlockRemoved");
    pack_str(p, "block_hashes"), pack_hashes(p, r->block_hashes);
    pack_str(p, "medium"), pack_opt(p, r->medium);
    if (r->group_idx) pack_str(p, "group_idx"), p.pack(*r->group_idx);
  } else {
    p.pack_map(1);
    pack_str(p, "type"), pack_str(p, "AllBlocksCleared");
  }
}

}  // namespace

BlockHash BlockHash::from_signed(int64_t v) {
  BlockHash h(static_cast<uint64_t>(v));
  h.negative_ = v < 0;
  return h;
}

BlockHash BlockHash::from_bytes(std::string_view digest) {
  // vLLM's digests are 32 bytes (sha256); other lengths are other engines' or future hashes.
  // Empty or over 64 bytes is no hash anybody sends: an error rather than a silent key.
  if (digest.empty() || digest.size() > 64)
    throw KvEventDecodeError("KV event batch: a block hash of " + std::to_string(digest.size()) +
                             " bytes (1 to 64 expected)");
  BlockHash h;
  h.bytes_ = std::string(digest);
  for (size_t i = digest.size() > 8 ? digest.size() - 8 : 0; i < digest.size(); ++i)
    h.bits_ = (h.bits_ << 8) | static_cast<unsigned char>(digest[i]);
  return h;
}

std::string BlockHash::text() const {
  if (!is_bytes()) return negative_ ? std::to_string(static_cast<int64_t>(bits_)) : std::to_string(bits_);
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(bytes_.size() * 2);
  for (unsigned char c : bytes_) out += hex[c >> 4], out += hex[c & 15];
  return out;
}

std::string encode_kv_event_batch(const KvEventBatch& b) {
  msgpack::sbuffer buf;
  Packer p(buf);
  p.pack_array(b.data_parallel_rank ? 3 : 2);  // the rank defaults to None: omitted when unset
  p.pack_double(b.ts);
  p.pack_array(static_cast<uint32_t>(b.events.size()));
  for (const KvEvent& e : b.events) pack_event(p, e);
  if (b.data_parallel_rank) p.pack(*b.data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

std::string encode_sequence_number(int64_t seq) {
  std::string out(8, '\0');
  const uint64_t u = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((u >> (56 - 8 * i)) & 0xff);
  return out;
}

int64_t decode_sequence_number(std::string_view frame) {
  if (frame.size() != 8)
    throw KvEventDecodeError("KV event batch: a sequence number frame must be 8 bytes, got " +
                             std::to_string(frame.size()));
  uint64_t u = 0;
  for (unsigned char c : frame) u = (u << 8) | c;
  return static_cast<int64_t>(u);
}

}  // namespace kvscope::kv_events
