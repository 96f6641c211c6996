// Scheduler: continuous batching, chunked prefill, preemption by recompute, rejection, cancel,
// prefix-cache admission. A fake engine appends a dummy token after every chunk that wants logits.
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "test_support.h"

using namespace kvscope;

namespace {

KvCacheConfig kv_cfg(int32_t bs, int32_t blocks, bool prefix = true) {
  KvCacheConfig c;
  c.block_size = bs;
  c.num_blocks = blocks;
  c.prefix_caching = prefix;
  return c;
}

SchedulerConfig sched_cfg(int32_t max_running, int32_t budget, int32_t max_len) {
  SchedulerConfig c;
  c.max_running = max_running;
  c.max_batched_tokens = budget;
  c.max_model_len = max_len;
  return c;
}

// Stands in for the Engine: owns the sequences, "samples" a dummy token after each chunk that
// wants logits, finishes a sequence at max_new_tokens.
struct FakeEngine {
  FakeEngine(Scheduler& s, KvCacheManager* k) : sched(s), kv(k) {}
  Scheduler& sched;
  KvCacheManager* kv;  // validated after every step
  std::vector<std::unique_ptr<Sequence>> seqs;

  Sequence* submit(SeqId id, std::vector<TokenId> prompt, int32_t max_new) {
    auto s = std::make_unique<Sequence>();
    s->id = id;
    s->set_prompt(std::move(prompt));
    s->max_new_tokens = max_new;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    std::set<SeqId> seen;
    for (const auto& c : out.chunks) {
      if (!seen.insert(c.seq->id).second) qFatal("sequence scheduled twice in one step");
      if (c.first_pos != c.seq->num_computed) qFatal("chunk does not start at num_computed");
    }
    if (out.total_tokens() > sched.config().max_batched_tokens) qFatal("token budget exceeded");
    sched.on_step_done(out);
    for (const auto& c : out.chunks) {
      if (!c.wants_logits) continue;
      Sequence* s = c.seq;
      s->tokens.push_back(500 + static_cast<TokenId>(s->output().size()));
      if (static_cast<int32_t>(s->output().size()) >= s->max_new_tokens) {
        s->finish = FinishReason::Length;
        sched.finish(s, SeqState::Finished);
      }
    }
    if (kv) kv->validate();
    return out;
  }
  int run(int max_steps = 1000) {
    int n = 0;
    while (sched.has_work() && n < max_steps) {
      step();
      ++n;
    }
    return n;
  }
};

std::vector<TokenId> tokens(int n, TokenId first = 1) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

}  // namespace

class TestScheduler : public QObject {
  Q_OBJECT
 private slots:
  void fcfs_admission();
  void max_running_limit();
  void chunked_prefill_within_budget();
  void preempts_newest_and_resumes();
  void rejects_what_can_never_fit();
  void cancel_frees_blocks_now();
  void prefix_cache_admission();
  void state_names();
};

void TestScheduler::fcfs_admission() {
  KvCacheManager kv(kv_cfg(4, 64));
  Scheduler sched(sched_cfg(8, 256, 128), kv);
  FakeEngine eng{sched, &kv};
  auto* a = eng.submit(1, tokens(5), 3);
  auto* b = eng.submit(2, tokens(7, 100), 3);
  auto* c = eng.submit(3, tokens(3, 200), 3);
  QVERIFY(a->arrival_order < b->arrival_order && b->arrival_order < c->arrival_order);
  const auto out = eng.step();
  QCOMPARE(out.chunks.size(), size_t(3));
  QCOMPARE(out.chunks[0].seq, a);
  QCOMPARE(out.chunks[1].seq, b);
  QCOMPARE(out.chunks[2].seq, c);
  for (const auto& ch : out.chunks) {
    QCOMPARE(ch.first_pos, 0);
    QCOMPARE(ch.n_tokens, ch.seq->total_len() - 1);  // whole prompt (the fake engine appended one)
    QVERIFY(ch.wants_logits);
  }
  QCOMPARE(a->state, SeqState::Running);
  QVERIFY(sched.waiting().empty());
  eng.run();
  for (auto* s : {a, b, c}) {
    QCOMPARE(s->state, SeqState::Finished);
    QCOMPARE(int(s->output().size()), 3);
  }
  QCOMPARE(kv.pool().num_used(), 0);
}

void TestScheduler::max_running_limit() {
  KvCacheManager kv(kv_cfg(4, 64));
  Scheduler sched(sched_cfg(2, 256, 128), kv);
  FakeEngine eng{sched, &kv};
  auto* a = eng.submit(1, tokens(4), 2);
  auto* b = eng.submit(2, tokens(4, 50), 5);
  auto* c = eng.submit(3, tokens(4, 90), 2);
  eng.step();
  QCOMPARE(int(sched.running().size()), 2);
  QCOMPARE(sched.waiting().front(), c);
  QCOMPARE(c->state, SeqState::Waiting);
  eng.step();  // a produces its 2nd token and finishes after this step
  QCOMPARE(a->state, SeqState::Finished);
  const auto out = eng.step();  // the freed place goes to c
  QCOMPARE(c->state, SeqState::Running);
  QCOMPARE(out.chunks.back().seq, c);
  QCOMPARE(out.chunks.front().seq, b);
  eng.run();
  QCOMPARE(b->state, SeqState::Finished);
  QCOMPARE(c->state, SeqState::Finished);
}

void TestScheduler::chunked_prefill_within_budget() {
  KvCacheManager kv(kv_cfg(4, 64));
  Scheduler sched(sched_cfg(8, 8, 128), kv);
  FakeEngine eng{sched, &kv};
  auto* a = eng.submit(1, tokens(3), 20);
  auto out = eng.step();
  QCOMPARE(out.chunks.size(), size_t(1));
  auto* b = eng.submit(2, tokens(30, 100), 2);
  // The long prompt is spread over 5 steps (7+7+7+7+2) while a keeps decoding 1 token a step.
  const std::vector<int> expect{7, 7, 7, 7, 2};
  int32_t pos = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    out = eng.step();
    QCOMPARE(out.chunks.size(), size_t(2));
    QCOMPARE(out.chunks[0].seq, a);
    QCOMPARE(out.chunks[0].n_tokens, 1);
    QVERIFY(out.chunks[0].wants_logits);
    QCOMPARE(out.chunks[1].seq, b);
    QCOMPARE(out.chunks[1].first_pos, pos);
    QCOMPARE(out.chunks[1].n_tokens, expect[i]);
    QCOMPARE(out.chunks[1].wants_logits, i + 1 == expect.size());  // logits only at the prompt's end
    QVERIFY(out.total_tokens() <= 8);
    pos += expect[i];
  }
  QCOMPARE(b->num_computed, 30);
  QCOMPARE(int(b->output().size()), 1);
  out = eng.step();  // both decode now
  QCOMPARE(out.total_tokens(), 2);
  eng.run();
  QCOMPARE(a->state, SeqState::Finished);
  QCOMPARE(b->state, SeqState::Finished);
}

void TestScheduler::preempts_newest_and_resumes() {
  // 6 blocks of 4: two sequences of 8 prompt tokens each grow until the pool runs dry.
  KvCacheManager kv(kv_cfg(4, 6, false));
  Scheduler sched(sched_cfg(8, 64, 64), kv);
  FakeEngine eng{sched, &kv};
  auto* a = eng.submit(1, tokens(8), 12);
  auto* b = eng.submit(2, tokens(8, 100), 12);
  SchedulerOutput out;
  int steps = 0;
  while (out.preempted.empty() && steps++ < 50) out = eng.step();
  QCOMPARE(out.preempted, std::vector<SeqId>{2});  // the newest goes, the oldest keeps running
  QCOMPARE(sched.preemptions(), 1u);
  QCOMPARE(b->state, SeqState::Preempted);
  QCOMPARE(b->preemptions, 1);
  QCOMPARE(b->num_computed, 0);
  QVERIFY(!kv.has_seq(2));
  QCOMPARE(sched.waiting().front(), b);
  const auto b_output = b->output_tokens();  // generated tokens are kept
  QVERIFY(!b_output.empty());
  QCOMPARE(out.chunks.size(), size_t(1));  // a got its token; nothing admitted after a preemption
  QCOMPARE(out.chunks[0].seq, a);

  // b waits until a finishes, then recomputes prompt + output as one prompt.
  bool resumed = false;
  while (sched.has_work() && steps++ < 200) {
    out = eng.step();
    for (const auto& ch : out.chunks) {
      if (ch.seq != b || ch.first_pos != 0) continue;
      QCOMPARE(a->state, SeqState::Finished);
      QCOMPARE(ch.n_tokens, 8 + int(b_output.size()));
      QVERIFY(ch.wants_logits);
      QCOMPARE(std::vector<TokenId>(b->output().begin(), b->output().begin() + b_output.size()), b_output);
      resumed = true;
    }
  }
  QVERIFY(resumed);
  QCOMPARE(a->state, SeqState::Finished);
  QCOMPARE(b->state, SeqState::Finished);
  QCOMPARE(int(a->output().size()), 12);
  QCOMPARE(int(b->output().size()), 12);
  QCOMPARE(kv.pool().num_used(), 0);
}

void TestScheduler::rejects_what_can_never_fit() {
  KvCacheManager kv(kv_cfg(4, 5));  // 20 token slots
  Scheduler sched(sched_cfg(8, 64, 32), kv);
  FakeEngine eng{sched, &kv};
  auto* ok1 = eng.submit(1, tokens(5), 3);
  auto* too_long = eng.submit(2, tokens(40, 100), 3);  // beyond max_model_len
  auto* too_big = eng.submit(3, tokens(24, 200), 3);   // fits max_model_len, not the whole pool
  auto* ok2 = eng.submit(4, tokens(6, 300), 3);
  const auto out = eng.step();
  QCOMPARE(out.rejected, (std::vector<SeqId>{2, 3}));
  QCOMPARE(too_long->state, SeqState::Rejected);
  QCOMPARE(too_long->finish, FinishReason::Rejected);
  QVERIFY2(QString::fromStdString(too_long->error).contains("max_model_len"), too_long->error.c_str());
  QVERIFY2(QString::fromStdString(too_big->error).contains("KV cache too small"), too_big->error.c_str());
  QVERIFY(!kv.has_seq(2) && !kv.has_seq(3));
  QCOMPARE(ok2->state, SeqState::Running);  // those behind the rejected ones are admitted
  eng.run();
  QCOMPARE(ok1->state, SeqState::Finished);
  QCOMPARE(ok2->state, SeqState::Finished);
  QCOMPARE(int(ok2->output().size()), 3);
}

void TestScheduler::cancel_frees_blocks_now() {
  KvCacheManager kv(kv_cfg(4, 32));
  Scheduler sched(sched_cfg(2, 256, 128), kv);
  FakeEngine eng{sched, &kv};
  auto* a = eng.submit(1, tokens(10), 50);
  auto* b = eng.submit(2, tokens(9, 100), 50);
  auto* c = eng.submit(3, tokens(9, 200), 50);  // waits (max_running 2)
  eng.step();
  const int32_t used = kv.pool().num_used();
  const int32_t a_blocks = kv.blocks_held(1);
  sched.finish(a, SeqState::Cancelled);
  QCOMPARE(kv.pool().num_used(), used - a_blocks);  // immediately, not at the next step
  QVERIFY(!kv.has_seq(1));
  QCOMPARE(a->state, SeqState::Cancelled);
  QCOMPARE(a->finish, FinishReason::Cancelled);
  QCOMPARE(int(sched.running().size()), 1);
  sched.finish(c, SeqState::Cancelled);  // a waiting one leaves the queue
  QVERIFY(sched.waiting().empty());
  kv.validate();
  const auto out = eng.step();
  QCOMPARE(out.chunks.size(), size_t(1));
  QCOMPARE(out.chunks[0].seq, b);
  sched.finish(b, SeqState::Cancelled);
  QVERIFY(!sched.has_work());
  QCOMPARE(kv.pool().num_used(), 0);
}

void TestScheduler::prefix_cache_admission() {
  KvCacheManager kv(kv_cfg(4, 64));
  Scheduler sched(sched_cfg(8, 256, 128), kv);
  FakeEngine eng{sched, &kv};
  const auto system = tokens(16);  // 4 full blocks
  auto pa = system;
  pa.insert(pa.end(), {90, 91, 92, 93});
  auto* a = eng.submit(1, pa, 4);
  eng.step();
  QCOMPARE(a->num_cached_prompt, 0);
  auto pb = system;
  pb.insert(pb.end(), {70, 71, 72, 73, 74, 75});
  auto* b = eng.submit(2, pb, 4);
  const auto out = eng.step();
  const auto& ch = out.chunks.back();
  QCOMPARE(ch.seq, b);
  QCOMPARE(ch.first_pos, 16);  // the shared system prompt is not recomputed
  QCOMPARE(ch.n_tokens, 6);
  QCOMPARE(b->num_cached_prompt, 16);
  QCOMPARE(b->num_computed, 22);  // after on_step_done
  QCOMPARE(kv.prefix_hits_tokens(), 16u);
  QCOMPARE(kv.prefix_queries_tokens(), 20u + 22u);
  eng.run();
  QCOMPARE(b->state, SeqState::Finished);
}

void TestScheduler::state_names() {
  QCOMPARE(QString(seq_state_name(SeqState::Preempted)), QString("preempted"));
  Sequence s;
  s.set_prompt({1, 2});
  s.tokens.push_back(3);  // generated
  QCOMPARE(s.tokens, (std::vector<TokenId>{1, 2, 3}));
  QCOMPARE(s.total_len(), 3);
}

QTEST_APPLESS_MAIN(TestScheduler)
#include "test_scheduler.moc"
