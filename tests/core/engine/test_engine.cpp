// The engine end to end on stories260K: preemption by recompute, rejection, cancellation,
// parallel sampling with copy-on-write, prefix caching on vs off, the contiguous baseline, and
// what the snapshot reports.
#include <QtTest>

#include <atomic>
#include <filesystem>
#include <thread>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "run/workload_runner.h"
#include "telemetry/block_events.h"
#include "telemetry/snapshot_json.h"
#include "test_support.h"
#include "timed_workload.h"
#include "workload/workload.h"

using namespace kvscope;

namespace {

std::shared_ptr<Model> stories() {
  static std::shared_ptr<Model> m = Model::load((test::models_dir() / "stories260K.gguf").string());
  return m;
}

std::unique_ptr<Engine> make_engine(EngineConfig cfg) {
  auto m = stories();
  return std::make_unique<Engine>(m, std::make_unique<CpuBackend>(m, 2), cfg);
}

Request story_request(const std::string& text, int32_t n) {
  Request r;
  r.prompt = stories()->tokenizer->encode(text, true, true);
  r.max_new_tokens = n;
  r.ignore_eos = true;
  return r;
}

std::vector<TokenId> run_alone(const Request& r) {
  EngineConfig cfg;
  cfg.num_blocks = 256;
  auto e = make_engine(cfg);
  const SeqId id = e->submit(r);
  e->run_until_idle();
  return e->sequence(id).output_tokens();
}

std::filesystem::path scenario(const std::string& name) {
  for (auto p = std::filesystem::current_path(); !p.empty(); p = p.parent_path()) {
    if (std::filesystem::exists(p / "resources/scenarios" / name)) return p / "resources/scenarios" / name;
    if (p == p.root_path()) break;
  }
  const char* src = std::getenv("KVSCOPE_SOURCE_DIR");
  return std::filesystem::path(src ? src : ".") / "resources/scenarios" / name;
}

}  // namespace

class TestEngine : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf"); }

  // A pool too small for all sequences forces preemption; every greedy sequence still produces
  // exactly the tokens it produces alone.
  void preempted_sequences_resume_identically() {
    const std::vector<std::string> prompts = {"Once upon a time", "Lily and Tom", "The dog", "One day, a little bird"};
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 24;  // 192 slots; the four sequences need about 4 x 90
    auto e = make_engine(cfg);
    std::vector<SeqId> ids;
    for (const auto& p : prompts) ids.push_back(e->submit(story_request(p, 80)));
    int steps = 0;
    while (e->step()) {
      ++steps;
      e->paged_kv()->validate();
    }
    QVERIFY2(e->snapshot()->counters.preemptions > 0, "the pool was meant to run out");
    for (size_t i = 0; i < prompts.size(); ++i) {
      QCOMPARE(e->sequence(ids[i]).state, SeqState::Finished);
      QCOMPARE(e->sequence(ids[i]).output_tokens(), run_alone(story_request(prompts[i], 80)));
    }
    qInfo("%d steps, %llu preemptions", steps, static_cast<unsigned long long>(e->snapshot()->counters.preemptions));
  }

  void too_long_request_rejected_others_run() {
    EngineConfig cfg;
    cfg.num_blocks = 64;
    cfg.sched.max_model_len = 64;
    auto e = make_engine(cfg);
    Request longr;
    longr.prompt.assign(100, 300);
    longr.prompt[0] = 1;
    const SeqId bad = e->submit(longr);
    const SeqId good = e->submit(story_request("Once upon a time", 20));
    e->run_until_idle();
    QCOMPARE(e->sequence(bad).state, SeqState::Rejected);
    QVERIFY(!e->sequence(bad).error.empty());
    qInfo("rejection message: %s", e->sequence(bad).error.c_str());
    QCOMPARE(e->sequence(good).state, SeqState::Finished);
    QCOMPARE(e->sequence(good).output_tokens().size(), size_t(20));
  }

  void invalid_prompts_rejected_with_reason() {
    auto e = make_engine(EngineConfig{});
    Request empty;
    Request bad_id;
    bad_id.prompt = {1, 99999};
    const SeqId a = e->submit(empty), b = e->submit(bad_id);
    QCOMPARE(e->sequence(a).state, SeqState::Rejected);
    QVERIFY(e->sequence(a).error.find("empty") != std::string::npos);
    QCOMPARE(e->sequence(b).state, SeqState::Rejected);
    QVERIFY(e->sequence(b).error.find("vocabulary") != std::string::npos);
  }

  void cancel_returns_blocks_at_once() {
    EngineConfig cfg;
    cfg.num_blocks = 64;
    cfg.prefix_caching = false;
    auto e = make_engine(cfg);
    const SeqId a = e->submit(story_request("Once upon a time there was a big dog", 200));
    for (int i = 0; i < 40; ++i) e->step();
    QVERIFY(e->snapshot()->memory.blocks_used > 0);
    e->cancel(a);
    QCOMPARE(e->snapshot()->memory.blocks_used, 0);
    QCOMPARE(e->sequence(a).state, SeqState::Cancelled);
    QVERIFY(!e->has_work());
  }

  // n = 3 greedy samples share the prompt's blocks (ref count 3) and copy the partly filled
  // last block on write; each produces the same tokens as a single greedy run.
  void parallel_samples_share_prompt_blocks() {
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 64;
    cfg.prefix_caching = false;  // sharing must come from fork, not from the prefix cache
    auto e = make_engine(cfg);
    const Request r = story_request("Once upon a time, there was a little", 12);  // 11 tokens: one partial block
    QVERIFY(r.prompt.size() % 8 != 0);
    const auto ids = e->submit_parallel(r, 3);
    QCOMPARE(ids.size(), size_t(3));
    e->step();  // prompt computed once, children forked, first tokens sampled
    const SnapshotPtr s1 = e->snapshot();
    int shared = 0;
    for (const BlockSnap& b : s1->blocks) shared += b.ref_count == 3;
    QVERIFY2(shared >= 1, "the full prompt block should be held by all three samples");
    // The JSON export names every holder of a shared block, not only the lowest id.
    const nlohmann::json j = to_json(*s1);
    int listed = 0;
    for (size_t b = 0; b < s1->blocks.size(); ++b)
      if (s1->blocks[b].ref_count == 3) {
        QCOMPARE(j["blocks"][b]["owners"], nlohmann::json(ids));
        ++listed;
      }
    QCOMPARE(listed, shared);
    e->run_until_idle();
    const auto ev = e->events_since(0);
    const bool cow =
        std::any_of(ev.begin(), ev.end(), [](const BlockEvent& x) { return x.kind == BlockEventKind::CopiedOnWrite; });
    QVERIFY2(cow, "the shared partial block must be copied on write");
    const auto alone = run_alone(r);
    for (SeqId id : ids) QCOMPARE(e->sequence(id).output_tokens(), alone);
    QCOMPARE(e->snapshot()->counters.tokens_prefilled, uint64_t(r.prompt.size()));
  }

  // On the baseline a fork reserves a second range and copies the parent's filled slots; the
  // copy must reach the backend as block copies (the reservations are block-aligned), or the
  // children would attend to another range's K/V. Each greedy sample matches a lone run.
  void contiguous_baseline_fork_copies_kv() {
    for (const char* policy : {"max-model-len", "request", "16"}) {
      EngineConfig cfg;
      cfg.block_size = 8;
      cfg.num_blocks = 64;
      cfg.sched.max_model_len = 96;
      cfg.prefix_caching = false;
      cfg.contiguous_baseline = true;
      cfg.baseline_reserve = *parse_baseline_reserve(policy);
      auto e = make_engine(cfg);
      const Request first = story_request("The sun was hot and the dog", 20);
      const SeqId other = e->submit(first);  // so the parent's range does not start at slot 0
      e->step();
      const Request r = story_request("Once upon a time, there was a little", 30);
      const auto ids = e->submit_parallel(r, 3);
      e->run_until_idle();
      const auto alone = run_alone(r);
      for (SeqId id : ids) QCOMPARE(e->sequence(id).output_tokens(), alone);
      QCOMPARE(e->sequence(other).output_tokens(), run_alone(first));
    }
  }

  // Prefix caching changes what is computed, never what is generated.
  void prefix_caching_on_off_identical_data() {
    QTest::addColumn<QString>("file");
    QTest::newRow("shared-system-prompt") << "shared-system-prompt.json";
    QTest::newRow("few-shot") << "few-shot.json";
    QTest::newRow("multi-turn-chat") << "multi-turn-chat.json";
  }
  void prefix_caching_on_off_identical() {
    QFETCH(QString, file);
    const Workload wl = load_workload(scenario(file.toStdString()));
    nlohmann::json out[2];
    for (int on = 0; on < 2; ++on) {
      EngineConfig cfg;
      cfg.num_blocks = 512;
      cfg.prefix_caching = on;
      cfg.sched.max_model_len = wl.max_model_len.value_or(512);
      auto e = make_engine(cfg);
      WorkloadRunner run(*e, wl);
      run.run_to_completion();
      out[on] = run.to_json();
    }
    for (size_t i = 0; i < out[0]["requests"].size(); ++i)
      QCOMPARE(out[1]["requests"][i]["tokens"], out[0]["requests"][i]["tokens"]);
    QCOMPARE(out[0]["prefix_cache_hits_tokens"].get<uint64_t>(), uint64_t(0));
    QVERIFY(out[1]["prefix_cache_hits_tokens"].get<uint64_t>() > 0);
    QVERIFY(out[1]["prefill_tokens"].get<uint64_t>() < out[0]["prefill_tokens"].get<uint64_t>());
    qInfo("%s: prefill tokens %llu -> %llu, hits %llu", qPrintable(file),
          out[0]["prefill_tokens"].get<unsigned long long>(), out[1]["prefill_tokens"].get<unsigned long long>(),
          out[1]["prefix_cache_hits_tokens"].get<unsigned long long>());
  }

  // The baseline runs the same workload through the same scheduler and model: same tokens,
  // far more memory reserved and far fewer requests at once, whatever its reservation policy.
  // A fixed guess shorter than the chats must grow in place or move (its K/V copied to the new
  // run) or be preempted, and the tokens must still be the paged run's.
  void contiguous_baseline_same_tokens_more_waste() {
    const Workload wl = load_workload(scenario("many-short-chats.json"));
    const char* policies[] = {"max-model-len", "request", "256", "64"};
    auto run = [&](const char* policy) {
      EngineConfig cfg;
      cfg.num_blocks = 512;
      cfg.prefix_caching = false;
      cfg.contiguous_baseline = policy != nullptr;
      if (policy) cfg.baseline_reserve = *parse_baseline_reserve(policy);
      cfg.sched.max_model_len = 2048;
      auto e = make_engine(cfg);
      WorkloadRunner runner(*e, wl);
      while (runner.step()) e->validate_kv();  // the arena's invariants after every step, too
      nlohmann::json j = runner.to_json();
      j["test_allocations"] = e->latest_snapshot()->counters.allocations;
      j["test_frees"] = e->latest_snapshot()->counters.frees;
      return j;
    };
    const nlohmann::json paged = run(nullptr);
    QCOMPARE(paged["requests"].size(), wl.requests.size());
    const double paged_waste = paged["waste_pct"];
    QVERIFY(paged_waste < 4.0);  // chat-length requests: only each sequence's last block is partly empty
    for (const char* policy : policies) {
      const nlohmann::json base = run(policy);
      qInfo(
          "%s: waste paged %.1f%%, contiguous %.1f%%; concurrency %d vs %d; %llu steps; overflows %llu "
          "(in place %llu, moved %llu, %llu slots copied); blocked %llu steps (%llu by fragmentation)",
          policy, paged_waste, base["waste_pct"].get<double>(), paged["max_concurrent"].get<int>(),
          base["max_concurrent"].get<int>(), base["steps"].get<unsigned long long>(),
          base["overflows"].get<unsigned long long>(), base["grown_in_place"].get<unsigned long long>(),
          base["relocations"].get<unsigned long long>(), base["relocated_slots"].get<unsigned long long>(),
          base["blocked_admission_steps"].get<unsigned long long>(),
          base["blocked_by_fragmentation_steps"].get<unsigned long long>());
      // Every reservation is given back; with one per request (no preemption, no move) exactly
      // one per request.
      QCOMPARE(base["test_allocations"], base["test_frees"]);
      if (std::string(policy) == "max-model-len") QCOMPARE(base["test_allocations"].get<size_t>(), wl.requests.size());
      for (size_t i = 0; i < paged["requests"].size(); ++i) {
        QCOMPARE(base["requests"][i]["state"], "finished");
        QCOMPARE(base["requests"][i]["tokens"].size(), static_cast<size_t>(wl.requests[i].max_new_tokens));
        QCOMPARE(base["requests"][i]["tokens"], paged["requests"][i]["tokens"]);
      }
      QVERIFY(base["waste_pct"].get<double>() > paged_waste);
      QVERIFY(base["blocked_admission_steps"].get<uint64_t>() > 0);
      const std::string p = policy;
      // A small guess admits as many as paging does; it pays in copies and preemptions instead.
      if (p == "64")
        QVERIFY(paged["max_concurrent"].get<int>() >= base["max_concurrent"].get<int>());
      else
        QVERIFY(paged["max_concurrent"].get<int>() > base["max_concurrent"].get<int>());
      if (p == "max-model-len") {
        // 4 requests at a time: thousands of steps, more than the engine keeps finished
        // sequences for. Every request's tokens must still be in the results.
        QVERIFY(base["steps"].get<uint64_t>() > 2000);
        QVERIFY(base["waste_pct"].get<double>() >= 60.0);
        QVERIFY(paged["max_concurrent"].get<int>() >= 3 * base["max_concurrent"].get<int>());
        QCOMPARE(base["blocked_by_fragmentation_steps"].get<uint64_t>(), 0u);  // equal sizes: no holes
      }
      if (p == "request") QVERIFY(base["blocked_by_fragmentation_steps"].get<uint64_t>() > 0);
      if (p == "request" || p == "max-model-len") QCOMPARE(base["overflows"].get<uint64_t>(), 0u);
      if (p == "64") {  // every chat outgrows 64 slots
        QVERIFY(base["relocations"].get<uint64_t>() > 0);
        QVERIFY(base["relocated_slots"].get<uint64_t>() > 0);
        QVERIFY(base["grown_in_place"].get<uint64_t>() > 0);
      }
    }
  }

  void snapshot_reports_blocks_and_events() {
    EngineConfig cfg;
    cfg.num_blocks = 32;
    auto e = make_engine(cfg);
    e->submit(story_request("Once upon a time", 30));
    e->step();
    const SnapshotPtr s = e->snapshot();
    int used = 0;
    for (const BlockSnap& b : s->blocks) used += b.status == BlockStatus::Used;
    QCOMPARE(used, s->memory.blocks_used);
    QCOMPARE(s->memory.blocks_used + s->memory.blocks_cached + s->memory.blocks_free, 32);
    QCOMPARE(static_cast<int>(s->seqs.size()), 1);
    QCOMPARE(static_cast<int>(s->seqs[0].block_table.size()), 1);  // 5 prompt tokens + 1 in one block
    QVERIFY(std::any_of(s->events.begin(), s->events.end(),
                        [](const BlockEvent& x) { return x.kind == BlockEventKind::Allocated; }));
    e->run_until_idle();
    const nlohmann::json j = to_json(*e->snapshot());
    for (const char* key : {"blocks", "sequences", "counters", "memory", "allocator", "events", "config"})
      QVERIFY(j.contains(key));
    QCOMPARE(j["counters"]["tokens_decoded"].get<int>(), 30);
    // Finished with prefix caching on: its full blocks stay cached-evictable, the rest is free.
    QCOMPARE(j["memory"]["blocks_used"].get<int>(), 0);
  }

  // Snapshots are built on demand and block events are derived from the blocks the pool
  // touched. Three engines run the same contended workload (prefix hits, evictions, parallel
  // samples sharing blocks, preemption): one read after every step, one read every 7 steps,
  // one whose events are taken with take_new_events(). All see the same events, and the
  // per-step ones match a whole-pool comparison of consecutive snapshots.
  void lazy_snapshots_keep_every_event() {
    auto config = [] {
      EngineConfig cfg;
      cfg.block_size = 8;
      cfg.num_blocks = 24;
      cfg.sched.max_running = 6;
      return cfg;
    };
    auto submit_all = [](Engine& e) {
      e.submit(story_request("Once upon a time there was a little girl", 40));
      Request p = story_request("One day a cat", 35);
      p.sampling.temperature = 0.8f;
      e.submit_parallel(p, 3);
      e.submit(story_request("The sun was hot and the dog", 45));
    };
    EngineConfig on_demand = config();
    on_demand.publish_every_step = false;  // sparse: snapshots built only when asked, every 7 steps
    auto every = make_engine(config()), sparse = make_engine(on_demand), taken = make_engine(on_demand);
    submit_all(*every), submit_all(*sparse), submit_all(*taken);
    std::vector<BlockEvent> ev_every, ev_sparse, ev_taken;
    SnapshotPtr prev = every->snapshot();
    int steps = 0;
    auto same = [](const BlockEvent& a, const BlockEvent& b) {
      return a.step == b.step && a.kind == b.kind && a.block == b.block && a.seq == b.seq && a.other == b.other &&
             a.group == b.group;
    };
    while (every->step()) {
      QVERIFY(sparse->step());
      QVERIFY(taken->step());
      ++steps;
      if (steps == 3)  // the first one's prompt blocks are cached and in use now: shared
        for (Engine* e : {every.get(), sparse.get(), taken.get()})
          e->submit(story_request("Once upon a time there was a little girl", 30));
      const SnapshotPtr cur = every->snapshot();
      QCOMPARE(cur->step, static_cast<uint64_t>(steps));  // current after step(), never stale
      std::vector<BlockEvent> diffs;
      for (const BlockEvent& x : cur->events)
        if (x.kind != BlockEventKind::Preempted && x.kind != BlockEventKind::CopiedOnWrite) diffs.push_back(x);
      const std::vector<BlockEvent> whole = diff_block_events(prev->blocks, cur->blocks, cur->step);
      QCOMPARE(diffs.size(), whole.size());
      for (size_t i = 0; i < whole.size(); ++i)
        QVERIFY2(same(diffs[i], whole[i]), qPrintable(QString("step %1 event %2").arg(steps).arg(i)));
      ev_every.insert(ev_every.end(), cur->events.begin(), cur->events.end());
      prev = cur;
      if (steps % 7 == 0) {
        const SnapshotPtr s = sparse->snapshot();
        ev_sparse.insert(ev_sparse.end(), s->events.begin(), s->events.end());
      }
      if (steps % 3 == 0) {
        const auto t = taken->take_new_events();
        ev_taken.insert(ev_taken.end(), t.begin(), t.end());
      }
    }
    QVERIFY(!sparse->step());
    const SnapshotPtr s = sparse->snapshot();
    ev_sparse.insert(ev_sparse.end(), s->events.begin(), s->events.end());
    const auto t = taken->take_new_events();
    ev_taken.insert(ev_taken.end(), t.begin(), t.end());
    QCOMPARE(s->step, static_cast<uint64_t>(steps));
    QCOMPARE(s->counters.tokens_decoded, every->snapshot()->counters.tokens_decoded);
    QCOMPARE(s->memory.blocks_used, every->snapshot()->memory.blocks_used);
    auto count = [&](BlockEventKind k) {
      return std::count_if(ev_every.begin(), ev_every.end(), [k](const BlockEvent& x) { return x.kind == k; });
    };
    qInfo("%d steps, %zu events: %td allocated, %td shared, %td cache hits, %td evicted, %td preempted", steps,
          ev_every.size(), count(BlockEventKind::Allocated), count(BlockEventKind::Shared),
          count(BlockEventKind::CacheHit), count(BlockEventKind::Evicted), count(BlockEventKind::Preempted));
    QVERIFY(count(BlockEventKind::Allocated) > 0 && count(BlockEventKind::Shared) > 0);
    for (const auto* other : {&ev_sparse, &ev_taken}) {
      QCOMPARE(other->size(), ev_every.size());
      for (size_t i = 0; i < ev_every.size(); ++i) QVERIFY(same((*other)[i], ev_every[i]));
    }
  }

  // Published after every step: a reader on another thread takes the newest snapshot whenever
  // it likes (atomic load), sees steps only move forward and never a half-built state, while the
  // engine thread checks each published snapshot against the pool itself (the incremental
  // block states and tallies against a fresh look at every block).
  void published_after_every_step_to_any_thread() {
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 40;  // tight: preemptions and evictions happen
    cfg.sched.max_running = 8;
    auto e = make_engine(cfg);
    for (int i = 0; i < 10; ++i)
      e->submit(story_request(i % 2 ? "Once upon a time there was a little girl" : "One day a cat", 30 + 3 * i));
    e->submit_parallel(story_request("The sun was hot and the dog", 25), 3);
    std::atomic<bool> done{false};
    std::atomic<int64_t> reads{0}, bad{0};
    std::thread reader([&] {
      uint64_t last = 0;
      while (!done.load()) {
        const SnapshotPtr s = e->latest_snapshot();
        int32_t used = 0;
        for (const BlockSnap& b : s->blocks) used += b.status == BlockStatus::Used;
        if (s->step < last || used != s->memory.blocks_used ||
            s->memory.blocks_used + s->memory.blocks_cached + s->memory.blocks_free != s->memory.blocks_total)
          ++bad;
        last = s->step;
        ++reads;
      }
    });
    struct JoinAtExit {  // a failed QCOMPARE returns early: the reader must still be stopped
      std::atomic<bool>& done;
      std::thread& t;
      ~JoinAtExit() {
        done = true;
        if (t.joinable()) t.join();
      }
    } join_at_exit{done, reader};
    int steps = 0;
    const BlockPool& pool = e->paged_kv()->pool();
    while (e->step()) {
      ++steps;
      if (steps == 12) e->cancel(3);
      const SnapshotPtr s = e->latest_snapshot();
      QCOMPARE(s->step, static_cast<uint64_t>(steps));  // published by step() itself
      QCOMPARE(s.get(), e->snapshot().get());           // nothing to rebuild
      int32_t used = 0, cached = 0;
      int64_t filled = 0;
      for (BlockId b = 0; b < pool.num_blocks(); ++b) {
        const BlockState& st = pool.state(b);
        const BlockSnap& x = s->blocks[static_cast<size_t>(b)];
        QCOMPARE(x.ref_count, st.ref_count);
        QCOMPARE(x.filled, st.filled);
        QCOMPARE(x.hash, st.hash);
        used += st.ref_count > 0;
        cached += st.ref_count == 0 && st.hashed;
        if (st.ref_count > 0) filled += st.filled;
      }
      QCOMPARE(s->memory.blocks_used, used);
      QCOMPARE(s->memory.blocks_cached, cached);
      QCOMPARE(s->memory.slots_filled, filled);
      // Each block's owner is the lowest id among the sequences whose tables hold it.
      std::vector<SeqId> lowest(s->blocks.size(), -1);
      for (const SeqSnap& q : s->seqs)
        for (BlockId b : q.block_table)
          if (b != kNoBlock && (lowest[static_cast<size_t>(b)] < 0 || q.id < lowest[static_cast<size_t>(b)]))
            lowest[static_cast<size_t>(b)] = q.id;
      for (size_t b = 0; b < s->blocks.size(); ++b) QCOMPARE(s->blocks[b].owner, lowest[b]);
    }
    done = true;
    reader.join();
    QCOMPARE(bad.load(), int64_t{0});
    QVERIFY(reads.load() > 0);
    QVERIFY(e->latest_snapshot()->counters.preemptions > 0);
    qInfo("%d steps, %lld snapshots read on the other thread", steps, static_cast<long long>(reads.load()));
  }

  // Arrival by wall-clock time: the late request is held back until its second has come (the
  // runner waits instead of spinning empty steps), the early one runs at once.
  void workload_arrival_by_time() {
    auto e = make_engine(EngineConfig{});
    WorkloadRunner runner(*e, test::now_and_later_workload(0.4));
    const auto t0 = std::chrono::steady_clock::now();
    double first_done_s = -1;
    while (runner.step())
      if (first_done_s < 0 && runner.progress() > 0)
        first_done_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto res = runner.results();
    QCOMPARE(res.size(), size_t{2});
    for (const auto& r : res) QCOMPARE(static_cast<int>(r.tokens.size()), 8);
    QVERIFY2(total_s >= 0.4, qPrintable(QString::number(total_s)));           // "later" waited for its time
    QVERIFY2(first_done_s < 0.4, qPrintable(QString::number(first_done_s)));  // "now" did not
    QVERIFY(runner.metrics().steps < 100);                                    // waiting took no empty steps
  }

  // The block-event history keeps the newest max_events and no more.
  void event_history_is_bounded() {
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 64;
    cfg.max_events = 20;
    auto e = make_engine(cfg);
    for (int i = 0; i < 4; ++i) e->submit(story_request("Once upon a time there was a little girl", 60));
    e->run_until_idle();
    const auto all = e->events_since(0);
    QCOMPARE(all.size(), size_t{20});
    QVERIFY(e->latest_snapshot()->counters.allocations > 20);  // far more happened than was kept
    for (size_t i = 1; i < all.size(); ++i) QVERIFY(all[i - 1].step <= all[i].step);
    QCOMPARE(all.back().step, e->latest_snapshot()->step);  // the newest are the ones kept
    QVERIFY(e->take_new_events().size() <= 2 * cfg.max_events);
  }

  // Without a KV cache every token recomputes the whole sequence: same tokens, quadratic work.
  void no_kv_cache_same_tokens_quadratic_work() {
    EngineConfig cfg;
    cfg.num_blocks = 64;
    cfg.no_kv_cache = true;
    auto e = make_engine(cfg);
    const Request r = story_request("Once upon a time", 40);
    const SeqId id = e->submit(r);
    e->run_until_idle();
    QCOMPARE(e->sequence(id).output_tokens(), run_alone(r));
    // Token i (0-based) of the output is sampled after computing prompt + i tokens.
    uint64_t expected = 0;
    for (int i = 0; i < 40; ++i) expected += r.prompt.size() + static_cast<uint64_t>(i);
    QCOMPARE(e->snapshot()->counters.tokens_prefilled, expected);
    QCOMPARE(e->snapshot()->memory.blocks_used, 0);
  }

  // Blocks that leave the sliding window are reported as such, not as plain frees.
  void window_drops_are_events() {
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 64;
    cfg.window = 16;
    cfg.prefix_caching = false;
    auto e = make_engine(cfg);
    e->submit(story_request("Once upon a time", 60));
    e->run_until_idle();
    const auto ev = e->events_since(0);
    const auto drops = std::count_if(ev.begin(), ev.end(),
                                     [](const BlockEvent& x) { return x.kind == BlockEventKind::DroppedOutOfWindow; });
    QVERIFY2(drops >= 4, "a 65-token sequence with a 16-token window drops several 8-token blocks");
  }

  // With attention sinks the snapshot marks exactly the blocks holding a sequence's first
  // `sinks` positions, every step.
  void sink_blocks_are_marked() {
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 64;
    cfg.window = 16;
    cfg.sinks = 10;  // positions 0..9: the first two blocks
    cfg.prefix_caching = false;
    auto e = make_engine(cfg);
    e->submit(story_request("Once upon a time", 40));
    e->submit(story_request("One day a cat", 30));
    int steps = 0;
    while (e->step()) {
      const SnapshotPtr s = e->latest_snapshot();
      std::vector<bool> want(s->blocks.size(), false);
      for (const SeqSnap& q : s->seqs)
        for (size_t lb = 0; lb < q.block_table.size() && lb < 2; ++lb)
          if (q.block_table[lb] != kNoBlock) want[static_cast<size_t>(q.block_table[lb])] = true;
      for (size_t b = 0; b < s->blocks.size(); ++b) QCOMPARE(s->blocks[b].sink, static_cast<bool>(want[b]));
      ++steps;
    }
    QVERIFY(steps > 30);
  }

  // A pool larger than the machine's memory fails at start-up with a message, not later.
  void oversized_pool_refused_at_startup() {
    EngineConfig cfg;
    cfg.num_blocks = 1 << 28;  // 20 KiB blocks: 5 TiB
    try {
      make_engine(cfg);
      QFAIL("a 5 TiB KV pool was accepted");
    } catch (const std::runtime_error& e) {
      qInfo("%s", e.what());
      QVERIFY(std::string(e.what()).find("MiB") != std::string::npos);
    }
  }

  // Ids returned by submit_parallel are the samples' real ids, even with other submissions in
  // between, and a parent cancelled before its prompt ran takes its samples with it.
  void parallel_sample_ids_are_reserved() {
    EngineConfig cfg;
    cfg.num_blocks = 64;
    auto e = make_engine(cfg);
    const auto ids = e->submit_parallel(story_request("Once upon a time", 8), 3);
    const SeqId other = e->submit(story_request("The dog", 8));
    QVERIFY(std::find(ids.begin(), ids.end(), other) == ids.end());
    e->run_until_idle();
    for (SeqId id : ids) QCOMPARE(e->sequence(id).output_tokens().size(), size_t(8));
    const auto ids2 = e->submit_parallel(story_request("Lily and Tom", 8), 2);
    e->cancel(ids2[0]);
    for (SeqId id : ids2) QCOMPARE(e->sequence(id).state, SeqState::Cancelled);
    QVERIFY(!e->has_work());
  }

  void bad_configs_refused() {
    EngineConfig c;
    c.block_size = 12;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, make_engine(c));
    EngineConfig d;
    d.sinks = 4;  // sinks without a window
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, make_engine(d));
    EngineConfig f;
    f.num_blocks = 0;
    f.kv_memory_bytes = 10;  // smaller than a block
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, make_engine(f));
  }
};

QTEST_APPLESS_MAIN(TestEngine)
#include "test_engine.moc"
