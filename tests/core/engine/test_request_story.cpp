// Every request's KV story on the real engine (stories260K): a prefix miss of each kind is
// constructed and its reason asserted (with the plain sentence a user reads), a forced
// preemption is asserted in the victim's record, waits say why, and the JSON export keeps its
// documented schema (docs/window-and-lessons.md, "Every request's KV story").
#include <QtTest>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/request_story_json.h"
#include "engine/request_story_text.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::shared_ptr<Model> stories() {
  static std::shared_ptr<Model> m = Model::load((test::models_dir() / "stories260K.gguf").string());
  return m;
}

std::unique_ptr<Engine> engine(EngineConfig cfg) {
  auto m = stories();
  return std::make_unique<Engine>(m, std::make_unique<CpuBackend>(m, 2), cfg);
}

EngineConfig pool(int32_t blocks) {
  EngineConfig c;
  c.num_blocks = blocks;
  return c;
}

// n distinct-looking token ids (inside the 512-token vocabulary), different per salt.
std::vector<TokenId> tokens(int n, int salt) {
  std::vector<TokenId> t;
  for (int i = 0; i < n; ++i) t.push_back(10 + (i * 7 + salt * 31) % 480);
  return t;
}

Request req(std::vector<TokenId> prompt, int32_t n_new) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = n_new;
  r.ignore_eos = true;
  return r;
}

SeqId run(Engine& e, const Request& r) {
  const SeqId id = e.submit(r);
  e.run_until_idle();
  return id;
}

const RequestStory& story(const Engine& e, SeqId id) {
  const RequestStory* s = e.stories().find(id, e.story_engine());
  if (!s) throw std::runtime_error("no story for request " + std::to_string(id));
  return *s;
}

const PrefixLookup& lookup(const Engine& e, SeqId id) { return story(e, id).admissions.at(0).lookup; }

QString miss_text(const Engine& e, SeqId id) {
  return QString::fromStdString(describe_miss(lookup(e, id), e.config().block_size));
}

QString all_text(const Engine& e, SeqId id) {
  QString s;
  for (const StoryLine& l : story_lines(story(e, id), e.config().block_size))
    s += QString::fromStdString(l.text) + "\n";
  return s;
}

}  // namespace

class TestRequestStory : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf"); }

  void never_cached_on_a_fresh_engine() {
    auto e = engine(pool(64));
    const SeqId a = run(*e, req(tokens(40, 1), 4));
    const PrefixLookup& l = lookup(*e, a);
    QCOMPARE(l.hit_tokens, 0);
    QCOMPARE(l.miss.reason, MissReason::NeverCached);
    QCOMPARE(l.miss.block_index, 0);
    QVERIFY2(miss_text(*e, a).contains("never cached"), qPrintable(miss_text(*e, a)));
  }

  // B shares A's first 20 tokens: block 0 hits, block 1 differs at token 20.
  void prompt_differs_names_the_token() {
    auto e = engine(pool(64));
    const std::vector<TokenId> pa = tokens(48, 1);
    std::vector<TokenId> pb = pa;
    pb[20] = 7;
    const SeqId a = run(*e, req(pa, 2));
    const SeqId b = run(*e, req(pb, 2));
    const PrefixLookup& l = lookup(*e, b);
    QCOMPARE(l.hit_tokens, 16);
    QCOMPARE(l.miss.reason, MissReason::PromptDiffers);
    QCOMPARE(l.miss.block_index, 1);
    QCOMPARE(l.miss.token_pos, 20);
    QCOMPARE(l.miss.token, 7);
    QCOMPARE(l.miss.other_token, pa[20]);
    QCOMPARE(l.miss.other, a);
    QCOMPARE(l.shared_tokens, 20);
    QVERIFY2(miss_text(*e, b).contains(QString("differs from request %1's at token 20").arg(a)),
             qPrintable(miss_text(*e, b)));
  }

  // A's cached blocks are taken by C's allocation in a small pool; B (A's prompt) finds block 1
  // evicted by C.
  void evicted_names_the_step_and_the_request() {
    auto e = engine(pool(8));
    const std::vector<TokenId> pa = tokens(48, 1);
    run(*e, req(pa, 4));
    const SeqId c = e->submit(req(tokens(100, 2), 4));
    e->step();
    const uint64_t evict_step = e->snapshot()->step;
    e->run_until_idle();
    const SeqId b = run(*e, req(pa, 2));
    const PrefixLookup& l = lookup(*e, b);
    QCOMPARE(l.miss.reason, MissReason::Evicted);
    QCOMPARE(l.miss.other, c);
    QCOMPARE(l.miss.step, evict_step);
    QCOMPARE(l.hit_tokens, l.miss.block_index * 16);
    QVERIFY2(
        miss_text(*e, b).contains(QString("evicted at step %1 to make room for request %2").arg(evict_step).arg(c)),
        qPrintable(miss_text(*e, b)));
  }

  // B's last decode step takes A's cached block 2 and B ends in the same step, so the block is
  // free again when the step is recorded: the allocator's eviction log still names B.
  void evicted_by_an_allocation_released_in_the_same_step() {
    auto e = engine(pool(8));
    const std::vector<TokenId> pa = tokens(48, 1);
    run(*e, req(pa, 1));                             // 3 full blocks, cached
    const SeqId b = run(*e, req(tokens(80, 2), 2));  // 5 blocks, then a 6th for its last token
    std::vector<TokenId> pc = pa;                    // longer than A's prompt, so that block 2 could have hit
    for (TokenId t : tokens(8, 5)) pc.push_back(t);
    const SeqId c = run(*e, req(pc, 1));
    const PrefixLookup& l = lookup(*e, c);
    QCOMPARE(l.hit_tokens, 32);
    QCOMPARE(l.miss.reason, MissReason::Evicted);
    QCOMPARE(l.miss.other, b);
    QVERIFY(!l.miss.orphaned);
    QCOMPARE(l.miss.step, story(*e, b).finish->step);
  }

  // A chat's next turn: the previous reply ended inside a block that never filled.
  void not_yet_full_when_the_other_request_ended_inside_the_block() {
    auto e = engine(pool(64));
    const SeqId a = run(*e, req(tokens(20, 1), 2));  // K/V for 21 tokens (the last sampled one never ran)
    std::vector<TokenId> pb = e->sequence(a).tokens;
    for (TokenId t : tokens(20, 3)) pb.push_back(t);
    const SeqId b = run(*e, req(pb, 2));
    const PrefixLookup& l = lookup(*e, b);
    QCOMPARE(l.hit_tokens, 16);
    QCOMPARE(l.miss.reason, MissReason::NotYetFull);
    QCOMPARE(l.miss.other, a);
    QCOMPARE(l.miss.filled, 5);
    QVERIFY2(miss_text(*e, b).contains("had computed only 5 of its 16 tokens"), qPrintable(miss_text(*e, b)));
  }

  void own_partial_block_and_last_token() {
    auto e = engine(pool(64));
    const std::vector<TokenId> pa = tokens(48, 1);
    run(*e, req(pa, 2));
    const SeqId exact = run(*e, req(std::vector<TokenId>(pa.begin(), pa.begin() + 32), 2));
    QCOMPARE(lookup(*e, exact).hit_tokens, 16);
    QCOMPARE(lookup(*e, exact).miss.reason, MissReason::LastPromptToken);
    QVERIFY(miss_text(*e, exact).contains("last token"));
    const SeqId partial = run(*e, req(std::vector<TokenId>(pa.begin(), pa.begin() + 40), 2));
    QCOMPARE(lookup(*e, partial).hit_tokens, 32);
    QCOMPARE(lookup(*e, partial).miss.reason, MissReason::NotYetFull);
    QCOMPARE(lookup(*e, partial).miss.filled, 8);
  }

  // Two engines share one story log: the second stores int8 K/V, so the f32 blocks of the
  // first could never serve it.
  void salt_differs_across_engines() {
    auto f32 = engine(pool(64));
    const SeqId a = run(*f32, req(tokens(40, 1), 2));
    EngineConfig c = pool(64);
    c.kv_dtype = KvDtype::INT8;
    auto i8 = engine(c);
    i8->use_story_log(f32->story_log());
    const SeqId b = run(*i8, req(tokens(40, 1), 2));
    const PrefixLookup& l = lookup(*i8, b);
    QCOMPARE(l.miss.reason, MissReason::SaltDiffers);
    QCOMPARE(l.miss.other, a);
    QVERIFY(l.miss.other_cache.find("f32") != std::string::npos);
    QVERIFY2(miss_text(*i8, b).contains("cached these tokens as f32"), qPrintable(miss_text(*i8, b)));
  }

  // Window = block size: when A's block 1 fills, block 0 has already left the window, so the
  // chain breaks and block 1 is never cached; B (A's tokens and more) misses it for that reason.
  void window_dropped_breaks_the_chain() {
    EngineConfig c = pool(64);
    c.window = 16;
    auto e = engine(c);
    const SeqId a = run(*e, req(tokens(20, 1), 40));
    QVERIFY(story(*e, a).window_drops > 0);
    std::vector<TokenId> pb = e->sequence(a).tokens;
    for (TokenId t : tokens(8, 3)) pb.push_back(t);
    const SeqId b = run(*e, req(pb, 2));
    const PrefixLookup& l = lookup(*e, b);
    QCOMPARE(l.hit_tokens, 16);
    QCOMPARE(l.miss.reason, MissReason::WindowDropped);
    QCOMPARE(l.miss.other, a);
    QCOMPARE(l.miss.step, story(*e, a).first_window_drop_step[0]);
    QVERIFY2(miss_text(*e, b).contains("sliding window dropped the block before it"), qPrintable(miss_text(*e, b)));
  }

  void prefix_caching_off() {
    EngineConfig c = pool(64);
    c.prefix_caching = false;
    auto e = engine(c);
    const SeqId a = run(*e, req(tokens(40, 1), 2));
    QCOMPARE(lookup(*e, a).miss.reason, MissReason::PrefixCachingOff);
  }

  // Two requests grow in a pool of 6 blocks: the older one's growth preempts the newer one.
  void forced_preemption_is_recorded() {
    auto e = engine(pool(6));
    const SeqId older = e->submit(req(tokens(40, 1), 40));
    const SeqId newer = e->submit(req(tokens(40, 2), 40));
    e->run_until_idle();
    const RequestStory& s = story(*e, newer);
    QVERIFY2(!s.preemptions.empty(), "the pool was meant to run dry");
    const StoryPreemption& p = s.preemptions.front();
    QCOMPARE(p.by, older);
    QVERIFY(p.tokens_lost >= 40);
    QCOMPARE(p.blocks_held, 3);
    QCOMPARE(p.blocks_freed, 3);  // nothing shared: all of it back in the pool
    QVERIFY(p.blocks_cached >= 2 && p.blocks_cached <= p.blocks_freed);
    QVERIFY(p.pool_used_before_pct > p.pool_used_after_pct);
    QCOMPARE(p.pool_used_before_pct, 100.0);
    QVERIFY(s.admissions.size() >= 2);
    QVERIFY(s.admissions[1].resumed);
    QVERIFY(s.admissions[1].recomputed_tokens > 0);
    QVERIFY(s.finish.has_value());
    QCOMPARE(s.finish->generated, 40);
    QVERIFY(story(*e, older).preemptions.empty());
    const QString text = all_text(*e, newer);
    QVERIFY2(text.contains(QString("Preempted at step %1: the pool was 100% used and request %2 needed blocks")
                               .arg(p.step)
                               .arg(older)),
             qPrintable(text));
    QVERIFY2(text.contains("Resumed at step"), qPrintable(text));
  }

  void waits_say_why() {
    EngineConfig c = pool(64);
    c.sched.max_running = 1;
    auto e = engine(c);
    const SeqId a = e->submit(req(tokens(20, 1), 4));
    const SeqId b = e->submit(req(tokens(20, 2), 4));
    const SeqId d = e->submit(req(tokens(20, 3), 4));
    e->run_until_idle();
    (void)a;
    const auto& wb = story(*e, b).admissions.at(0).waits;
    QVERIFY(!wb.empty());
    QCOMPARE(wb.front().reason, WaitReason::MaxRunning);
    const auto& wd = story(*e, d).admissions.at(0).waits;
    QVERIFY(!wd.empty());
    QCOMPARE(wd.front().reason, WaitReason::HeadOfLine);
    QCOMPARE(wd.front().behind, b);
    QVERIFY(all_text(*e, d).contains(QString("request %1 at the head of the queue").arg(b)));
  }

  void finish_says_where_the_blocks_went() {
    auto e = engine(pool(64));
    const SeqId a = run(*e, req(tokens(40, 1), 4));
    const StoryFinish& f = *story(*e, a).finish;
    QCOMPARE(f.generated, 4);
    QCOMPARE(f.blocks_cached, 2);  // 43 tokens computed: blocks 0 and 1 full (hashed), block 2 partial
    QCOMPARE(f.blocks_freed, 1);
    QCOMPARE(story(*e, a).blocks_allocated, 3);
  }

  // A reasoning model's thoughts take KV blocks: the story counts the reply's reasoning tokens and
  // the blocks holding them. stories260K never writes </think>, so a reply whose prompt opened
  // the block is thinking to its last token; a reply that did not open one has none.
  void reasoning_tokens_and_blocks() {
    auto e = engine(pool(64));
    Request r = req(tokens(21, 1), 30);
    r.reasoning = {ReasoningFormat::Think, ReplyStart::InReasoning};
    const SeqId a = run(*e, r);
    const RequestStory& s = story(*e, a);
    QVERIFY(s.reasoning.has_value());
    QCOMPARE(s.reasoning->span.tokens, 30);
    QVERIFY(!s.reasoning->span.closed);
    // Positions 21..50 in blocks of 16: blocks 1, 2 and 3.
    const int32_t bs = e->config().block_size;
    QCOMPARE(s.reasoning->blocks, (21 + 30 - 1) / bs - 21 / bs + 1);
    QVERIFY2(
        all_text(*e, a).contains("30 of the 30 generated tokens (100%) were thinking, held in 3 blocks of 16 tokens; "
                                 "the reply ended while still thinking"),
        qPrintable(all_text(*e, a)));
    const nlohmann::json j = story_to_json(s, bs, {});
    QCOMPARE(j["reasoning"]["tokens"].get<int>(), 30);
    QCOMPARE(j["reasoning"]["blocks"].get<int>(), 3);
    QCOMPARE(j["reasoning"]["format"].get<std::string>(), std::string("think"));
    QCOMPARE(j["reasoning"]["closed"].get<bool>(), false);

    r.reasoning.start = ReplyStart::Fresh;  // the story text does not open a <think> block
    const SeqId b = run(*e, r);
    QCOMPARE(story(*e, b).reasoning->span.tokens, 0);
    QVERIFY(all_text(*e, b).contains("Reasoning (think): none; all 30 generated tokens are the answer."));
    r.reasoning = {};  // no parser: no reasoning line at all
    const SeqId c = run(*e, r);
    QVERIFY(!story(*e, c).reasoning && !all_text(*e, c).contains("Reasoning"));
    QVERIFY(story_to_json(story(*e, c), bs, {})["reasoning"].is_null());
  }

  // The schema docs/window-and-lessons.md documents.
  void json_schema() {
    auto e = engine(pool(6));
    const SeqId older = e->submit(req(tokens(40, 1), 40));
    const SeqId newer = e->submit(req(tokens(40, 2), 40));
    e->run_until_idle();
    (void)older;
    const nlohmann::json j = story_to_json(story(*e, newer), 16, [](TokenId t) { return std::to_string(t); });
    for (const char* k : {"engine", "id", "label", "forked_from", "arrival", "prompt_tokens", "admissions", "waiting",
                          "blocks", "blocks_allocated", "copies", "preemptions", "window_drops", "finish", "timeline"})
      QVERIFY2(j.contains(k), k);
    QCOMPARE(j["id"].get<int64_t>(), newer);
    const auto& adm = j["admissions"][0];
    for (const char* k : {"step", "wait_ms", "resumed", "recomputed_tokens", "waits", "lookup"})
      QVERIFY2(adm.contains(k), k);
    for (const char* k :
         {"prompt_tokens", "hit_tokens", "blocks_attached", "shared_tokens", "shared_with", "miss", "text"})
      QVERIFY2(adm["lookup"].contains(k), k);
    QCOMPARE(adm["lookup"]["miss"]["reason"].get<std::string>(), std::string("never_cached"));
    const auto& p = j["preemptions"][0];
    for (const char* k : {"step", "by", "tokens_lost", "blocks_held", "blocks_freed", "blocks_cached",
                          "pool_used_before_pct", "pool_used_after_pct"})
      QVERIFY2(p.contains(k), k);
    QCOMPARE(j["finish"]["reason"].get<std::string>(), std::string("length limit"));
    QVERIFY(j["timeline"].size() >= 5);
    QVERIFY(j["timeline"][0].contains("step") && j["timeline"][0].contains("kind") &&
            j["timeline"][0].contains("text"));
  }

  // The history is bounded; live stories are always kept.
  void bounded_history() {
    RequestStoryLog log(3);
    const uint64_t eng = log.new_engine();
    for (SeqId i = 1; i <= 10; ++i) {
      log.open(eng, i);
      if (i < 10) log.close(eng, i);
    }
    QCOMPARE(log.all().size(), size_t(4));
    QCOMPARE(log.dropped(), size_t(6));
    QVERIFY(log.find(10) != nullptr);
    QVERIFY(log.find(2) == nullptr);
  }
};

QTEST_MAIN(TestRequestStory)
#include "test_request_story.moc"
