#pragma once
// The server publishes with the shared KV-event codec (kv_events/kv_events_codec.h); these
// names keep serve's code and tests in its own namespace.
#include "kv_events/kv_events_codec.h"

namespace kvscope::serve {
using kv_events::BlockHash;
using kv_events::decode_kv_event_batch;
using kv_events::decode_sequence_number;
using kv_events::encode_kv_event_batch;
using kv_events::encode_sequence_number;
using kv_events::KvAllBlocksCleared;
using kv_events::KvBlockRemoved;
using kv_events::KvBlockStored;
using kv_events::KvEvent;
using kv_events::KvEventBatch;
using kv_events::KvEventDecodeError;
}  // namespace kvscope::serve
