// Decodes a KVEventBatch payload of any generation (see kv_events_codec.h for the shapes).
#include <algorithm>
#include <map>
#include <string>

#include "kv_events/kv_events_codec.h"

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>

namespace kvscope::kv_events {
namespace {

using Obj = msgpack::object;
using Fields = std::map<std::string, const Obj*, std::less<>>;

[[noreturn]] void bad(const std::string& what) { throw KvEventDecodeError("KV event batch: " + what); }

bool is_nil(const Obj* o) { return !o || o->type == msgpack::type::NIL; }

std::string as_str(const Obj& o, const char* field) {
  if (o.type != msgpack::type::STR) bad(std::string(field) + " is not a string");
  return std::string(o.via.str.ptr, o.via.str.size);
}

int64_t as_int(const Obj& o, const char* field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(INT64_MAX)) bad(std::string(field) + " is out of range");
    return static_cast<int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  bad(std::string(field) + " is not an integer");
}

int32_t as_i32(const Obj& o, const char* field) {
  const int64_t v = as_int(o, field);
  if (v < INT32_MIN || v > INT32_MAX) bad(std::string(field) + " is out of range");
  return static_cast<int32_t>(v);
}

BlockHash as_hash(const Obj& o) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) return BlockHash(o.via.u64);
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return BlockHash::from_signed(o.via.i64);
  if (o.type == msgpack::type::BIN) return BlockHash::from_bytes(std::string_view(o.via.bin.ptr, o.via.bin.size));
  bad("a block hash is neither an integer nor bytes");
}

const Obj& as_array(const Obj& o, const char* field) {
  if (o.type != msgpack::type::ARRAY) bad(std::string(field) + " is not an array");
  return o;
}

std::vector<BlockHash> as_hashes(const Obj& o) {
  as_array(o, "block_hashes");
  std::vector<BlockHash> out;
  out.reserve(o.via.array.size);  // bounded: the unpacker already holds that many objects
  for (uint32_t i = 0; i < o.via.array.size; ++i) out.push_back(as_hash(o.via.array.ptr[i]));
  return out;
}

std::optional<std::string> opt_str(const Obj* o, const char* f) {
  return is_nil(o) ? std::nullopt : std::optional(as_str(*o, f));
}
std::optional<int32_t> opt_i32(const Obj* o, const char* f) {
  return is_nil(o) ? std::nullopt : std::optional(as_i32(*o, f));
}
std::optional<int64_t> opt_i64(const Obj* o, const char* f) {
  return is_nil(o) ? std::nullopt : std::optional(as_int(*o, f));
}

// The fields each event type declares, in declaration order (the positional form's order).
// Only the prefix up to the last one vLLM ever sent positionally has positions.
const std::vector<std::string>& known_fields(const std::string& type) {
  static const std::map<std::string, std::vector<std::string>> k = {
      {"BlockStored",
       {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "group_idx",
        "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}},
      {"BlockRemoved", {"block_hashes", "medium", "group_idx"}},
      {"AllBlocksCleared", {}}};
  static const std::vector<std::string> none;
  auto it = k.find(type);
  return it == k.end() ? none : it->second;
}

bool is_known_type(const std::string& type) {
  return type == "BlockStored" || type == "BlockRemoved" || type == "AllBlocksCleared";
}

KvBlockStored decode_stored(const Fields& f) {
  auto get = [&](const char* k) -> const Obj* {
    auto it = f.find(k);
    return it == f.end() ? nullptr : it->second;
  };
  auto need = [&](const char* k) -> const Obj& {
    if (const Obj* o = get(k)) return *o;
    bad(std::string("BlockStored lacks ") + k);
  };
  KvBlockStored s;
  s.block_hashes = as_hashes(need("block_hashes"));
  if (!is_nil(get("parent_block_hash"))) s.parent_block_hash = as_hash(*get("parent_block_hash"));
  const Obj& t = as_array(need("token_ids"), "token_ids");
  s.token_ids.reserve(t.via.array.size);
  for (uint32_t i = 0; i < t.via.array.size; ++i) s.token_ids.push_back(as_int(t.via.array.ptr[i], "token_ids"));
  s.block_size = as_i32(need("block_size"), "block_size");
  s.lora_id = opt_i64(get("lora_id"), "lora_id");
  s.medium = opt_str(get("medium"), "medium");
  s.lora_name = opt_str(get("lora_name"), "lora_name");
  s.group_idx = opt_i32(get("group_idx"), "group_idx");
  s.kv_cache_spec_kind = opt_str(get("kv_cache_spec_kind"), "kv_cache_spec_kind");
  s.kv_cache_spec_sliding_window = opt_i32(get("kv_cache_spec_sliding_window"), "kv_cache_spec_sliding_window");
  return s;
}

KvEvent decode_fields(const std::string& type, const Fields& f) {
  if (type == "BlockStored") return decode_stored(f);
  if (type == "BlockRemoved") {
    auto it = f.find("block_hashes");
    if (it == f.end()) bad("BlockRemoved lacks block_hashes");
    KvBlockRemoved r;
    r.block_hashes = as_hashes(*it->second);
    auto m = f.find("medium"), g = f.find("group_idx");
    r.medium = opt_str(m == f.end() ? nullptr : m->second, "medium");
    r.group_idx = opt_i32(g == f.end() ? nullptr : g->second, "group_idx");
    return r;
  }
  return KvAllBlocksCleared{};
}

// Keeps the fields `type` declares, counts the others.
void add_field(Fields& f, const std::string& type, std::string key, const Obj* v, KvDecodeStats& st) {
  const auto& known = known_fields(type);
  if (std::find(known.begin(), known.end(), key) == known.end())
    ++st.ignored_fields;
  else
    f[std::move(key)] = v;
}

// One event; nullopt for a type we do not know (counted).
std::optional<KvEvent> decode_event(const Obj& o, KvDecodeStats& st) {
  Fields fields;
  std::string type;
  if (o.type == msgpack::type::MAP) {
    for (uint32_t i = 0; i < o.via.map.size; ++i)
      if (as_str(o.via.map.ptr[i].key, "an event key") == "type") type = as_str(o.via.map.ptr[i].val, "type");
    if (type.empty()) bad("an event has no type tag");
    if (!is_known_type(type)) return ++st.ignored_events, std::nullopt;
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      std::string k = as_str(o.via.map.ptr[i].key, "an event key");
      if (k != "type") add_field(fields, type, std::move(k), &o.via.map.ptr[i].val, st);
    }
  } else if (o.type == msgpack::type::ARRAY && o.via.array.size >= 1) {
    type = as_str(o.via.array.ptr[0], "the event tag");  // array_like + tag: [tag, fields...]
    if (!is_known_type(type)) return ++st.ignored_events, std::nullopt;
    // Positional events ended before group_idx existed: vLLM 0.10 sends 6 BlockStored fields,
    // some builds a 7th (lora_name); BlockRemoved has 2.
    const auto& order = known_fields(type);
    const size_t positional = type == "BlockStored" ? 7 : type == "BlockRemoved" ? 2 : 0;
    for (uint32_t i = 1; i < o.via.array.size; ++i) {
      if (i - 1 < positional)
        fields[order[i - 1]] = &o.via.array.ptr[i];
      else
        ++st.ignored_fields;
    }
  } else {
    bad("an event is neither a map nor an array");
  }
  return decode_fields(type, fields);
}

double as_ts(const Obj& ts) {
  if (ts.type == msgpack::type::FLOAT64 || ts.type == msgpack::type::FLOAT32) return ts.via.f64;
  return static_cast<double>(as_int(ts, "ts"));
}

// The batch's three slots, from its array or map form.
struct BatchSlots {
  const Obj* ts = nullptr;
  const Obj* events = nullptr;
  const Obj* rank = nullptr;
};

BatchSlots batch_slots(const Obj& o, KvDecodeStats& st) {
  BatchSlots s;
  if (o.type == msgpack::type::ARRAY) {
    if (o.via.array.size < 2) bad("the batch array has fewer than 2 entries [ts, events, rank]");
    s.ts = &o.via.array.ptr[0], s.events = &o.via.array.ptr[1];
    if (o.via.array.size >= 3) s.rank = &o.via.array.ptr[2];
    st.ignored_fields += o.via.array.size > 3 ? o.via.array.size - 3 : 0;
  } else if (o.type == msgpack::type::MAP) {
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const std::string k = as_str(o.via.map.ptr[i].key, "a batch key");
      const Obj* v = &o.via.map.ptr[i].val;
      if (k == "ts")
        s.ts = v;
      else if (k == "events")
        s.events = v;
      else if (k == "data_parallel_rank" || k == "attn_dp_rank")
        s.rank = v;
      else
        ++st.ignored_fields;
    }
    if (!s.ts || !s.events) bad("the batch map lacks ts or events");
  } else {
    bad("the batch is neither an array [ts, events, rank] nor a map");
  }
  return s;
}

}  // namespace

KvEventBatch decode_kv_event_batch(std::string_view payload, KvDecodeStats* stats) {
  KvDecodeStats local;
  KvDecodeStats& st = stats ? *stats : local;
  msgpack::object_handle oh;
  try {
    // A container header may claim up to 2^32 entries, which msgpack would allocate up front:
    // no container can hold more entries than the payload has bytes, so that bounds them, and
    // a hostile header is an error rather than a huge allocation. Nesting: 32 levels (the
    // deepest real event is 4).
    const size_t n = payload.size();
    const msgpack::unpack_limit limit(n, n / 2, n, n, n, 32);
    oh = msgpack::unpack(payload.data(), n, nullptr, nullptr, limit);
  } catch (const std::exception& e) { bad(std::string("not msgpack: ") + e.what()); }
  const BatchSlots s = batch_slots(oh.get(), st);
  KvEventBatch b;
  b.ts = as_ts(*s.ts);
  as_array(*s.events, "events");
  for (uint32_t i = 0; i < s.events->via.array.size; ++i)
    if (auto ev = decode_event(s.events->via.array.ptr[i], st)) b.events.push_back(std::move(*ev));
  if (!is_nil(s.rank)) b.data_parallel_rank = as_i32(*s.rank, "data_parallel_rank");
  return b;
}

}  // namespace kvscope::kv_events
