#pragma once
// One fuzz input through everything attach does with untrusted network bytes: the KV-event
// decoder (any generation), the reconstruction it feeds (InstanceStream -> CacheView ->
// tree shape), and the Prometheus text parser with the metric summary. Decode errors are the
// documented outcome; a finding is another exception, an ASan/UBSan report, or a broken
// invariant (abort with "fuzz invariant"): a batch that decodes must re-encode and decode to
// itself. Shared by the libFuzzer target (fuzz_kv_events.cpp) and the seed replay under ctest
// (tests/attach/test_attach_units.cpp).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attach/instance_stream.h"
#include "attach/metrics_summary.h"
#include "attach/prefix_forest.h"
#include "attach/prometheus_parse.h"
#include "kv_events/kv_events_codec.h"

namespace kvscope::fuzz_attach {

inline void invariant(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant: %s\n", what);
    std::abort();
  }
}

// Returns whether the bytes decoded as a batch.
inline bool run_one(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  bool decoded = false;
  try {
    const kv_events::KvEventBatch b = kv_events::decode_kv_event_batch(bytes);
    decoded = true;
    if (!std::isnan(b.ts))
      invariant(kv_events::decode_kv_event_batch(kv_events::encode_kv_event_batch(b)) == b, "re-encoded batch differs");
  } catch (const kv_events::KvEventDecodeError&) {}
  // Twice through one stream (a duplicate, then a gap after it), so removes meet stores.
  attach::InstanceStream s;
  s.on_message({"t", kv_events::encode_sequence_number(0), bytes}, 1);
  s.on_message({"t", kv_events::encode_sequence_number(2), bytes}, 2);
  invariant(s.counters().batches + s.counters().undecodable == 2, "a message neither applied nor counted");
  (void)attach::tree_shape(s.view());
  const attach::PromText p = attach::parse_prometheus_text(bytes);
  attach::ScrapeStats st;
  attach::summarize_metrics(p, st);
  invariant(p.lines >= p.errors, "more errors than lines");
  return decoded;
}

}  // namespace kvscope::fuzz_attach
