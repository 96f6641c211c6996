// `kvscope-cli replay`'s core (run/trace_reader.h, run/trace_replay.h): hand-built traces with
// answers worked out by hand from the engine's prefix-cache rules (full blocks only, never the
// block holding the last prompt token, LRU eviction tail first), and every malformed-input case
// with its line number.
#include <QtTest>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "run/trace_reader.h"
#include "run/trace_replay.h"
#include "run/trace_workload.h"

using namespace kvscope;

namespace {

TraceRequest req(int32_t input_length, std::vector<int64_t> ids, int64_t line = 0) {
  TraceRequest r;
  r.input_length = input_length;
  r.hash_ids = std::move(ids);
  r.line = line;
  return r;
}

ReplayPoint replay(const std::vector<TraceRequest>& t, int32_t bs, int64_t capacity) {
  ReplayOptions o;
  o.block_size = bs;
  o.validate = true;  // the manager's invariants after every request
  return replay_trace(t, capacity, o);
}

std::vector<TraceRequest> read(const std::string& text, TraceReaderOptions o = {}, int64_t* skipped = nullptr) {
  std::istringstream in(text);
  return read_trace(in, o, skipped);
}

// The line number a malformed trace stops at (0 if it does not stop).
int64_t bad_line(const std::string& text, TraceReaderOptions o = {}) {
  try {
    read(text, o);
  } catch (const TraceError& e) {
    qInfo("%s", e.what());
    return e.line;
  }
  return 0;
}

const std::string kGood = R"({"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]})";

}  // namespace

class TestTraceReplay : public QObject {
  Q_OBJECT
 private slots:
  void shared_prefix_exact_hits() {
    // Two prompts of three full 512-token blocks sharing the first two: the second hits 1024.
    const auto p = replay({req(1536, {1, 2, 3}), req(1536, {1, 2, 4})}, 512, 0);
    QCOMPARE(p.prompt_tokens, uint64_t{3072});
    QCOMPARE(p.hit_tokens, uint64_t{1024});
    QCOMPARE(p.evictions, uint64_t{0});
    QCOMPARE(p.requests, int64_t{2});
    QCOMPARE(p.hit_ratio(), 1024.0 / 3072.0);
  }

  void last_prompt_token_block_never_hits() {
    // The same 1536-token prompt again: its third block holds the last token, which the engine
    // recomputes for the logits, so only 1024 hit. One token more and all three blocks hit.
    QCOMPARE(replay({req(1536, {1, 2, 3}), req(1536, {1, 2, 3})}, 512, 0).hit_tokens, uint64_t{1024});
    QCOMPARE(replay({req(1536, {1, 2, 3}), req(1537, {1, 2, 3, 4})}, 512, 0).hit_tokens, uint64_t{1536});
    // A partial trace block is never cached at block size 512.
    QCOMPARE(replay({req(1000, {1, 2}), req(1200, {1, 2, 3})}, 512, 0).hit_tokens, uint64_t{512});
  }

  void block_size_16_vs_512() {
    // 1000 tokens twice: at 512 one full block (512) can hit; at 16 the partial trace block's
    // 30 full 16-token blocks can too, up to the block holding token 999: 62 blocks = 992.
    const std::vector<TraceRequest> t = {req(1000, {1, 2}), req(1000, {1, 2})};
    QCOMPARE(replay(t, 512, 0).hit_tokens, uint64_t{512});
    QCOMPARE(replay(t, 16, 0).hit_tokens, uint64_t{992});
    // Different second ids: only the first 512-token identity is shared, at any block size.
    const std::vector<TraceRequest> u = {req(1000, {1, 2}), req(1000, {1, 3})};
    QCOMPARE(replay(u, 512, 0).hit_tokens, uint64_t{512});
    QCOMPARE(replay(u, 16, 0).hit_tokens, uint64_t{512});
    QCOMPARE(replay(u, 128, 0).hit_tokens, uint64_t{512});
  }

  void chain_not_id_decides() {
    // The same id after a different prefix is different K/V: no hit past the first difference.
    QCOMPARE(replay({req(1536, {1, 2, 3}), req(1537, {9, 2, 3, 4})}, 512, 0).hit_tokens, uint64_t{0});
  }

  void lru_eviction_removes_shared_prefix() {
    // A 3-block pool: the unrelated request in between evicts all three cached blocks.
    const std::vector<TraceRequest> t = {req(1536, {1, 2, 3}), req(1536, {4, 5, 6}), req(1536, {1, 2, 3})};
    const auto small = replay(t, 512, 1536);
    QCOMPARE(small.pool_blocks, 3);
    QCOMPARE(small.hit_tokens, uint64_t{0});
    QCOMPARE(small.evictions, uint64_t{6});
    const auto unbounded = replay(t, 512, 0);
    QCOMPARE(unbounded.hit_tokens, uint64_t{1024});
    QCOMPARE(unbounded.evictions, uint64_t{0});
    // One block more: the middle request takes the free block, then the LRU head: the first
    // request's blocks were freed tail first, so ids 3 and 2 go and id 1 survives.
    const auto four = replay(t, 512, 2048);
    QCOMPARE(four.hit_tokens, uint64_t{512});
  }

  void request_longer_than_pool() {
    // Two blocks for a three-block prompt: the head that fits is cached, the rest is a miss.
    const auto p = replay({req(1536, {1, 2, 3}), req(1536, {1, 2, 3})}, 512, 1024);
    QCOMPARE(p.hit_tokens, uint64_t{1024});
    QCOMPARE(p.truncated_requests, int64_t{2});
    // A pool smaller than one block never crashes and never hits.
    const auto none = replay({req(1536, {1, 2, 3}), req(1536, {1, 2, 3})}, 512, 100);
    QCOMPARE(none.pool_blocks, 0);
    QCOMPARE(none.hit_tokens, uint64_t{0});
  }

  void capacity_granularity() {
    // 1024 tokens is two 512-blocks or 64 16-blocks; 1000 tokens floors to one 512-block.
    QCOMPARE(replay({req(100, {1})}, 512, 1000).pool_blocks, 1);
    QCOMPARE(replay({req(100, {1})}, 16, 1024).pool_blocks, 64);
  }

  void threads_give_the_serial_curve() {
    const std::vector<TraceRequest> t = {req(1536, {1, 2, 3}), req(1536, {4, 5, 6}), req(1537, {1, 2, 3, 7}),
                                         req(1000, {1, 2})};
    const std::vector<int64_t> caps = {0, 1024, 1536, 2048, 4096};
    ReplayOptions one, three;
    one.block_size = three.block_size = 16;
    three.threads = 3;
    const auto a = replay_curve(t, caps, one), b = replay_curve(t, caps, three);
    QCOMPARE(a.size(), caps.size());
    for (size_t i = 0; i < caps.size(); ++i) {
      QCOMPARE(b[i].capacity_tokens, caps[i]);
      QCOMPARE(b[i].hit_tokens, a[i].hit_tokens);
      QCOMPARE(b[i].evictions, a[i].evictions);
    }
    QVERIFY(a[0].hit_tokens > a[1].hit_tokens);
    three.block_size = 48;  // an error in a worker thread reaches the caller
    QVERIFY_THROWS_EXCEPTION(TraceError, replay_curve(t, caps, three));
  }

  void block_size_must_divide() {
    const std::vector<TraceRequest> t = {req(100, {1}, 1), req(100, {1}, 2)};
    QVERIFY_THROWS_EXCEPTION(TraceError, check_replay_block_size(t, 48));
    check_replay_block_size(t, 512);
    check_replay_block_size(t, 1);
  }

  void synthesized_tokens_follow_ids() {
    std::vector<TokenId> a, b;
    synthesize_prompt(req(600, {7, 8}, 1), a);
    synthesize_prompt(req(600, {7, 9}, 2), b);
    QCOMPARE(a.size(), size_t{600});
    QVERIFY(std::equal(a.begin(), a.begin() + 512, b.begin()));
    QVERIFY(a[512] != b[512]);
    for (TokenId t : a) QVERIFY(t >= 0);
  }

  void workload_carries_the_same_prompts() {
    // The live-engine comparison (tests/app/cli_replay_engine.sh) runs these prompts: replay's
    // tokens below the vocabulary, one request at a time, no generated token to cache.
    const std::vector<TraceRequest> t = {req(600, {7, 8}, 1), req(40, {7}, 2)};
    const Workload w = trace_to_workload(t, 512, "t");
    QCOMPARE(w.requests.size(), size_t{2});
    std::vector<TokenId> p;
    synthesize_prompt(t[0], p, 512);
    QCOMPARE(w.requests[0].prompt_ids, p);
    for (TokenId id : p) QVERIFY(id >= 0 && id < 512);
    QCOMPARE(w.requests[0].max_new_tokens, 1);
    QVERIFY(w.requests[1].arrival_step > w.requests[0].arrival_step + 600);
    QVERIFY_THROWS_EXCEPTION(TraceError, trace_to_workload(std::vector<TraceRequest>{req(0, {}, 3)}, 512, "t"));
  }

  void reads_mooncake_and_kvscope() {
    const auto m = read(kGood + "\n\n" + kGood + "\r\n");
    QCOMPARE(m.size(), size_t{2});
    QCOMPARE(m[1].line, int64_t{3});  // blank lines count
    QCOMPARE(m[0].input_length, 1000);
    QCOMPARE(m[0].block_size, 512);
    TraceReaderOptions o;
    o.format = TraceFormat::Kvscope;
    const auto k =
        read(R"({"timestamp_ms": 5, "input_length": 40, "output_length": 1, "hash_ids": [3, 4, 5], "block_size": 16,)"
             R"( "session_id": "s1"})",
             o);
    QCOMPARE(k.size(), size_t{1});
    QCOMPARE(k[0].block_size, 16);
    QCOMPARE(k[0].session_id, std::string("s1"));
    QCOMPARE(k[0].timestamp_ms, int64_t{5});
    // kvscope's schema needs block_size; Mooncake's field names are not kvscope's.
    QCOMPARE(bad_line(kGood, o), int64_t{1});
  }

  void malformed_lines_name_their_line() {
    const std::string g = kGood + "\n";
    QCOMPARE(bad_line(g + "{not json\n" + g), int64_t{2});
    QCOMPARE(bad_line(g + g + R"({"timestamp": 0, "input_length": -3, "output_length": 5, "hash_ids": []})"),
             int64_t{3});
    QCOMPARE(bad_line(g + R"({"timestamp": 0, "input_length": 3, "output_length": -1, "hash_ids": [1]})"), int64_t{2});
    QCOMPARE(bad_line(R"({"timestamp": 9, "input_length": 3, "output_length": 1, "hash_ids": [1]})"
                      "\n" +
                      g),
             int64_t{2});  // timestamp goes back
    QCOMPARE(bad_line(g + R"({"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2, 3]})"),
             int64_t{2});  // 3 ids for 1000 tokens
    QCOMPARE(bad_line(g + "[1, 2]\n"), int64_t{2});
    QCOMPARE(bad_line(g + g + R"({"timestamp": 0, "input_length": 3, "output_length": 1})"), int64_t{3});
    QCOMPARE(bad_line(g + R"({"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1.5]})"), int64_t{2});
    QCOMPARE(bad_line(g + R"({"timestamp": "0", "input_length": 3, "output_length": 1, "hash_ids": [1]})"), int64_t{2});
    TraceReaderOptions small;
    small.max_line_bytes = 100;
    QCOMPARE(bad_line(g + g + std::string(300, ' ') + kGood + "\n" + g, small), int64_t{3});
    QCOMPARE(bad_line(g + std::string(300, 'x'), small), int64_t{2});  // last line, no newline
    QCOMPARE(bad_line(g + g, small), int64_t{0});
  }

  void garbage_never_breaks_anything() {
    // Mutated good lines and random bytes (NULs, lone CRs, huge numbers): every line is a
    // request or a counted skip, and whatever is read replays with the invariants intact.
    std::mt19937 rng(31);
    static constexpr char kBytes[] = "{}[]\":,0123456789-.e \t\r\x00\xff";  // the NUL inside counts
    const std::string alphabet = std::string(kBytes, sizeof kBytes - 1) + "hash_ids";
    std::string text;
    int64_t lines = 0;
    for (int i = 0; i < 3000; ++i, ++lines) {
      std::string l = R"({"timestamp": )" + std::to_string(i * 1000) +
                      R"(, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]})";
      const int edits = static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) l[rng() % l.size()] = alphabet[rng() % alphabet.size()];
      if (rng() % 10 == 0) l = std::string(rng() % 200, alphabet[rng() % alphabet.size()]);
      text += l + "\n";
    }
    TraceReaderOptions o;
    o.skip_bad = true;
    o.max_line_bytes = 150;
    int64_t skipped = 0;
    const auto reqs = read(text, o, &skipped);
    QVERIFY(skipped > 0);
    QVERIFY(static_cast<int64_t>(reqs.size()) + skipped <= lines);
    qInfo("%zu requests, %lld skipped of %lld lines", reqs.size(), static_cast<long long>(skipped),
          static_cast<long long>(lines));
    // Not many: once a mutation makes a timestamp jump ahead (1000 -> 10e9), later lines go back.
    QVERIFY(reqs.size() > 50);
    for (const TraceRequest& r : reqs) QVERIFY(r.input_length >= 0 && r.line >= 1 && r.line <= lines);
    std::vector<TraceRequest> small(reqs.begin(), reqs.begin() + std::min<size_t>(300, reqs.size()));
    for (TraceRequest& r : small) r.input_length = std::min(r.input_length, 4000);  // keep it quick
    for (TraceRequest& r : small)
      if (static_cast<int64_t>(r.hash_ids.size()) * 512 > r.input_length + 511)
        r.hash_ids.resize((r.input_length + 511) / 512);
    QVERIFY(replay(small, 16, 4096).prompt_tokens > 0);
  }

  void skip_bad_counts_and_goes_on() {
    TraceReaderOptions o;
    o.skip_bad = true;
    o.max_line_bytes = 100;
    const std::string g = kGood + "\n";
    int64_t skipped = -1;
    const auto r = read(g + "{oops\n" + std::string(300, 'y') + "\n" + g +
                            R"({"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []})" + "\n" + g,
                        o, &skipped);
    QCOMPARE(skipped, int64_t{3});
    QCOMPARE(r.size(), size_t{3});
    QCOMPARE(r[1].line, int64_t{4});
    QCOMPARE(r[2].line, int64_t{6});
  }
};

QTEST_APPLESS_MAIN(TestTraceReplay)
#include "test_trace_replay.moc"
