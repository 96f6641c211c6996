#include "serve/kv_events_codec.h"

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>

#include <map>

namespace kvscope::serve {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void pack_str(Packer& p, std::string_view s) {
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

template <class T>
void pack_opt(Packer& p, const std::optional<T>& v) {
  if (!v) {
    p.pack_nil();
  } else if constexpr (std::is_same_v<T, std::string>) {
    pack_str(p, *v);
  } else {
    p.pack(*v);
  }
}


void pack_event(Packer& p, const KvEvent& ev) {
  if (const auto* s = std::get_if<KvBlockStored>(&ev)) {
    const uint32_t n = 8 + (s->group_idx ? 1 : 0) + (s->kv_cache_spec_kind ? 1 : 0) + (s->kv_cache_spec_sliding_window ? 1 : 0);
    p.pack_map(n);
    pack_str(p, "type"), pack_str(p, "BlockStored");
    pack_str(p, "block_hashes"), p.pack(s->block_hashes);
    pack_str(p, "parent_block_hash"), pack_opt(p, s->parent_block_hash);
    pack_str(p, "token_ids"), p.pack(s->token_ids);
    pack_str(p, "block_size"), p.pack(s->block_size);
    pack_str(p, "lora_id"), pack_opt(p, s->lora_id);
    pack_str(p, "medium"), pack_opt(p, s->medium);
    pack_str(p, "lora_name"), pack_opt(p, s->lora_name);
    if (s->group_idx) pack_str(p, "group_idx"), p.pack(*s->group_idx);
    if (s->kv_cache_spec_kind) pack_str(p, "kv_cache_spec_kind"), pack_str(p, *s->kv_cache_spec_kind);
    if (s->kv_cache_spec_sliding_window) pack_str(p, "kv_cache_spec_sliding_window"), p.pack(*s->kv_cache_spec_sliding_window);
  } else if (const auto* r = std::get_if<KvBlockRemoved>(&ev)) {
    p.pack_map(3 + (r->group_idx ? 1 : 0));
    pack_str(p, "type"), pack_str(p, "BlockRemoved");
    pack_str(p, "block_hashes"), p.pack(r->block_hashes);
    pack_str(p, "medium"), pack_opt(p, r->medium);
    if (r->group_idx) pack_str(p, "group_idx"), p.pack(*r->group_idx);
  } else {
    p.pack_map(1);
    pack_str(p, "type"), pack_str(p, "AllBlocksCleared");
  }
}

[[noreturn]] void bad(const std::string& what) { throw KvEventDecodeError("KV event batch: " + what); }

std::string as_str(const msgpack::object& o, const char* field) {
  if (o.type != msgpack::type::STR) bad(std::string(field) + " is not a string");
  return std::string(o.via.str.ptr, o.via.str.size);
}

int64_t as_int(const msgpack::object& o, const char* field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(INT64_MAX)) bad(std::string(field) + " is out of range");
    return static_cast<int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  bad(std::string(field) + " is not an integer");
}

// A block hash: an unsigned 64-bit integer, or vLLM's bytes form (its low 64 bits, big-endian,
// as vLLM's own int conversion takes them).
uint64_t as_hash(const msgpack::object& o) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return o.via.u64;
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return static_cast<uint64_t>(o.via.i64);
  if (o.type == msgpack::type::BIN) {
    uint64_t h = 0;
    const uint32_t n = o.via.bin.size;
    for (uint32_t i = n > 8 ? n - 8 : 0; i < n; ++i) h = (h << 8) | static_cast<unsigned char>(o.via.bin.ptr[i]);
    return h;
  }
  bad("a block hash is neither an integer nor bytes");
}

std::vector<uint64_t> as_hashes(const msgpack::object& o) {
  if (o.type != msgpack::type::ARRAY) bad("block_hashes is not an array");
  std::vector<uint64_t> out;
  for (uint32_t i = 0; i < o.via.array.size; ++i) out.push_back(as_hash(o.via.array.ptr[i]));
  return out;
}

template <class T>
std::optional<T> opt(const msgpack::object* o, T (*conv)(const msgpack::object&, const char*), const char* field) {
  if (!o || o->type == msgpack::type::NIL) return std::nullopt;
  return conv(*o, field);
}

int64_t conv_i64(const msgpack::object& o, const char* f) { return as_int(o, f); }
int32_t conv_i32(const msgpack::object& o, const char* f) {
  const int64_t v = as_int(o, f);
  if (v < INT32_MIN || v > INT32_MAX) bad(std::string(f) + " is out of range");
  return static_cast<int32_t>(v);
}
std::string conv_str(const msgpack::object& o, const char* f) { return as_str(o, f); }

KvEvent decode_fields(const std::string& type, const std::map<std::string, const msgpack::object*>& f) {
  auto get = [&](const char* k) -> const msgpack::object* {
    auto it = f.find(k);
    return it == f.end() ? nullptr : it->second;
  };
  auto need = [&](const char* k) -> const msgpack::object& {
    const msgpack::object* o = get(k);
    if (!o) bad(type + " lacks " + k);
    return *o;
  };
  if (type == "BlockStored") {
    KvBlockStored s;
    s.block_hashes = as_hashes(need("block_hashes"));
    const msgpack::object* ph = get("parent_block_hash");
    if (ph && ph->type != msgpack::type::NIL) s.parent_block_hash = as_hash(*ph);
    const msgpack::object& t = need("token_ids");
    if (t.type != msgpack::type::ARRAY) bad("token_ids is not an array");
    for (uint32_t i = 0; i < t.via.array.size; ++i) s.token_ids.push_back(as_int(t.via.array.ptr[i], "token_ids"));
    s.block_size = conv_i32(need("block_size"), "block_size");
    s.lora_id = opt<int64_t>(get("lora_id"), conv_i64, "lora_id");
    s.medium = opt<std::string>(get("medium"), conv_str, "medium");
    s.lora_name = opt<std::string>(get("lora_name"), conv_str, "lora_name");
    s.group_idx = opt<int32_t>(get("group_idx"), conv_i32, "group_idx");
    s.kv_cache_spec_kind = opt<std::string>(get("kv_cache_spec_kind"), conv_str, "kv_cache_spec_kind");
    s.kv_cache_spec_sliding_window = opt<int32_t>(get("kv_cache_spec_sliding_window"), conv_i32, "kv_cache_spec_sliding_window");
    return s;
  }
  if (type == "BlockRemoved") {
    KvBlockRemoved r;
    r.block_hashes = as_hashes(need("block_hashes"));
    r.medium = opt<std::string>(get("medium"), conv_str, "medium");
    r.group_idx = opt<int32_t>(get("group_idx"), conv_i32, "group_idx");
    return r;
  }
  if (type == "AllBlocksCleared") return KvAllBlocksCleared{};
  bad("unknown event type '" + type + "'");
}

KvEvent decode_event(const msgpack::object& o) {
  std::map<std::string, const msgpack::object*> fields;
  if (o.type == msgpack::type::MAP) {
    std::string type;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const std::string k = as_str(o.via.map.ptr[i].key, "an event key");
      if (k == "type") type = as_str(o.via.map.ptr[i].val, "type");
      else fields[k] = &o.via.map.ptr[i].val;
    }
    if (type.empty()) bad("an event has no type tag");
    return decode_fields(type, fields);
  }
  if (o.type == msgpack::type::ARRAY && o.via.array.size >= 1) {
    // vLLM before 0.11 sent events array_like: [tag, fields in declaration order...].
    const std::string type = as_str(o.via.array.ptr[0], "the event tag");
    static const std::map<std::string, std::vector<const char*>> order = {
        {"BlockStored", {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}},
        {"BlockRemoved", {"block_hashes", "medium"}},
        {"AllBlocksCleared", {}}};
    auto it = order.find(type);
    if (it == order.end()) bad("unknown event type '" + type + "'");
    for (uint32_t i = 1; i < o.via.array.size && i - 1 < it->second.size(); ++i) fields[it->second[i - 1]] = &o.via.array.ptr[i];
    return decode_fields(type, fields);
  }
  bad("an event is neither a map nor an array");
}

}  // namespace

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

KvEventBatch decode_kv_event_batch(std::string_view payload) {
  msgpack::object_handle oh;
  try {
    // A container header may claim up to 2^32 entries, which msgpack would allocate up front:
    // no container can hold more entries than the payload has bytes, so that bounds them (and
    // the nesting), and a hostile header is an error rather than a huge allocation.
    const size_t n = payload.size();
    const msgpack::unpack_limit limit(n, n / 2, n, n, n, 64);
    oh = msgpack::unpack(payload.data(), n, nullptr, nullptr, limit);
  } catch (const std::exception& e) {
    bad(std::string("not msgpack: ") + e.what());
  }
  const msgpack::object& o = oh.get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size < 2) bad("not an array [ts, events, rank]");
  KvEventBatch b;
  const msgpack::object& ts = o.via.array.ptr[0];
  if (ts.type == msgpack::type::FLOAT64 || ts.type == msgpack::type::FLOAT32) b.ts = ts.via.f64;
  else b.ts = static_cast<double>(as_int(ts, "ts"));
  const msgpack::object& evs = o.via.array.ptr[1];
  if (evs.type != msgpack::type::ARRAY) bad("events is not an array");
  for (uint32_t i = 0; i < evs.via.array.size; ++i) b.events.push_back(decode_event(evs.via.array.ptr[i]));
  if (o.via.array.size >= 3 && o.via.array.ptr[2].type != msgpack::type::NIL)
    b.data_parallel_rank = conv_i32(o.via.array.ptr[2], "data_parallel_rank");
  return b;
}

std::string encode_sequence_number(int64_t seq) {
  std::string out(8, '\0');
  const uint64_t u = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((u >> (56 - 8 * i)) & 0xff);
  return out;
}

int64_t decode_sequence_number(std::string_view frame) {
  if (frame.size() != 8) bad("a sequence number frame must be 8 bytes, got " + std::to_string(frame.size()));
  uint64_t u = 0;
  for (unsigned char c : frame) u = (u << 8) | c;
  return static_cast<int64_t>(u);
}

}  // namespace kvscope::serve
