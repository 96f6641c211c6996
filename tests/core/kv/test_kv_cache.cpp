// BlockPool and KvCacheManager: the bookkeeping every KV number in the UI rests on.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::vector<TokenId> iota_tokens(int n, TokenId first = 1) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

KvCacheConfig small_cfg(int32_t bs, int32_t blocks, bool prefix = true) {
  KvCacheConfig c;
  c.block_size = bs;
  c.num_blocks = blocks;
  c.prefix_caching = prefix;
  return c;
}

// Admit like the scheduler does: attach the cached prefix, then slots for the rest.
int32_t admit(KvCacheManager& kv, SeqId id, const std::vector<TokenId>& prompt) {
  const int32_t cached = kv.attach_cached_prefix(id, prompt);
  if (!kv.allocate_slots(id, prompt, static_cast<int32_t>(prompt.size()) - cached)) return -1;
  return cached;
}

}  // namespace

class TestKvCache : public QObject {
  Q_OBJECT
 private slots:
  void pool_basics();
  void pool_lru_eviction_order();
  void pool_collision_is_never_a_hit();
  void pool_eviction_orphans_descendants();
  void hash_mixes_parent_tokens_and_salt();
  void prefix_hits_misses_and_counters();
  void last_prompt_token_is_never_a_hit();
  void duplicate_chains_keep_their_continuations();
  void prefix_caching_off();
  void evictable_blocks_revive_and_evict();
  void fork_copy_on_write();
  void sliding_window_bounds_blocks();
  void sliding_window_with_prefix_cache();
  void failed_allocation_changes_nothing();
  void randomized_property_full_attention();
  void randomized_property_window_and_sinks();

 private:
  void run_property(const KvCacheConfig& cfg, uint32_t seed, int ops);
};

void TestKvCache::pool_basics() {
  BlockPool pool(4, 16);
  QCOMPARE(pool.num_blocks(), 4);
  QCOMPARE(pool.num_free(), 4);
  std::vector<BlockId> got;
  for (int i = 0; i < 4; ++i) got.push_back(*pool.allocate());
  QCOMPARE(got, (std::vector<BlockId>{0, 1, 2, 3}));  // a fresh pool hands out ids in order
  QVERIFY(!pool.allocate().has_value());
  QCOMPARE(pool.num_used(), 4);
  QCOMPARE(pool.num_free(), 0);
  pool.ref(2);
  QCOMPARE(pool.state(2).ref_count, 2);
  pool.unref(2);
  QCOMPARE(pool.num_used(), 4);
  pool.unref(2);
  QCOMPARE(pool.num_used(), 3);
  QCOMPARE(pool.num_free(), 1);
  QCOMPARE(pool.num_evictable(), 0);
  QCOMPARE(pool.counters().allocations, 4u);
  QCOMPARE(pool.counters().frees, 1u);
  pool.validate();
  // Accessor checks stay on in Release and throw.
  QVERIFY_THROWS_EXCEPTION(std::logic_error, pool.state(4));
  QVERIFY_THROWS_EXCEPTION(std::logic_error, pool.unref(2));  // already free
  QVERIFY_THROWS_EXCEPTION(std::logic_error, pool.ref(2));    // free and uncached: allocate() it
  QVERIFY_THROWS_EXCEPTION(std::logic_error, pool.set_filled(0, 17));
}

void TestKvCache::pool_lru_eviction_order() {
  BlockPool pool(4, 2);
  for (int i = 0; i < 4; ++i) pool.allocate();
  const std::vector<TokenId> t{7, 8};
  for (BlockId b = 0; b < 4; ++b) pool.set_hash(b, 100 + b, kNoBlock, t);
  for (BlockId b : {2, 0, 3, 1}) pool.unref(b);  // cached-evictable, freed in this order
  QCOMPARE(pool.num_evictable(), 4);
  pool.validate();
  // Revive block 0: it leaves the queue and keeps its content.
  pool.ref(0);
  QCOMPARE(pool.num_evictable(), 3);
  QCOMPARE(*pool.lookup(100, kNoBlock, t), 0);
  pool.unref(0);  // now the most recently freed
  std::vector<BlockId> order;
  for (int i = 0; i < 4; ++i) order.push_back(*pool.allocate());
  QCOMPARE(order, (std::vector<BlockId>{2, 3, 1, 0}));  // least recently freed first
  QCOMPARE(pool.counters().evictions, 4u);
  QCOMPARE(pool.num_evictable(), 0);
  QVERIFY(!pool.lookup(100, kNoBlock, t).has_value());
  pool.validate();
}

void TestKvCache::pool_collision_is_never_a_hit() {
  BlockPool pool(4, 4);
  const BlockId a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  const std::vector<TokenId> ta{1, 2, 3, 4}, tb{9, 9, 9, 9};
  const BlockHash h = 0xdeadbeef;  // injected: two different blocks, one 64-bit hash
  pool.set_hash(a, h, kNoBlock, ta);
  pool.set_hash(b, h, kNoBlock, tb);
  pool.validate();
  QCOMPARE(*pool.lookup(h, kNoBlock, ta), a);
  QCOMPARE(*pool.lookup(h, kNoBlock, tb), b);
  QVERIFY(!pool.lookup(h, kNoBlock, std::vector<TokenId>{1, 2, 3, 5}).has_value());  // same hash, other tokens
  // Same hash and tokens, other parent: the K/V were computed after a different prefix.
  pool.set_hash(c, h, a, ta);
  QCOMPARE(*pool.lookup(h, a, ta), c);
  QCOMPARE(*pool.lookup(h, kNoBlock, ta), a);
  QVERIFY(!pool.lookup(h, b, ta).has_value());
  pool.validate();
}

void TestKvCache::pool_eviction_orphans_descendants() {
  BlockPool pool(3, 1);
  const BlockId a = *pool.allocate(), b = *pool.allocate(), c = *pool.allocate();
  pool.set_hash(a, 1, kNoBlock, std::vector<TokenId>{10});
  pool.set_hash(b, 2, a, std::vector<TokenId>{11});
  pool.set_hash(c, 3, b, std::vector<TokenId>{12});
  pool.unref(a);  // a evictable; b, c still in use
  const BlockId reused = *pool.allocate();
  QCOMPARE(reused, a);
  // a's id now holds other content: b and c (computed after a's old content) must never be hit.
  QVERIFY(!pool.state(b).hashed);
  QVERIFY(!pool.state(c).hashed);
  QCOMPARE(pool.counters().evictions, 1u);
  QCOMPARE(pool.counters().orphaned, 2u);
  pool.set_hash(a, 1, kNoBlock, std::vector<TokenId>{99});
  QVERIFY(!pool.lookup(2, a, std::vector<TokenId>{11}).has_value());
  pool.validate();
}

void TestKvCache::hash_mixes_parent_tokens_and_salt() {
  const std::vector<TokenId> t{1, 2, 3, 4};
  const BlockHash h = block_hash(kRootBlockHash, t, 0);
  QCOMPARE(block_hash(kRootBlockHash, t, 0), h);
  QVERIFY(block_hash(kRootBlockHash, t, 1) != h);
  QVERIFY(block_hash(h, t, 0) != h);
  QVERIFY(block_hash(kRootBlockHash, std::vector<TokenId>{1, 2, 4, 3}, 0) != h);
  QVERIFY(block_hash(kRootBlockHash, std::vector<TokenId>{1, 2, 3, 4, 0}, 0) != h);
}

void TestKvCache::prefix_hits_misses_and_counters() {
  KvCacheManager kv(small_cfg(4, 16));
  const auto sys = iota_tokens(12);  // 3 full blocks of shared "system prompt"
  const auto p1 = concat(sys, {100, 101, 102});
  QCOMPARE(admit(kv, 1, p1), 0);
  QCOMPARE(kv.prefix_queries_tokens(), 15u);
  QCOMPARE(kv.prefix_hits_tokens(), 0u);
  // Full blocks were registered in allocate_slots: 3 of them (the 4th is partial).
  int hashed = 0;
  for (BlockId b : kv.block_table(1)) hashed += kv.pool().state(b).hashed;
  QCOMPARE(hashed, 3);

  const auto p2 = concat(sys, {200, 201, 202, 203, 204});
  QCOMPARE(admit(kv, 2, p2), 12);
  QCOMPARE(kv.stats(2).cached_prompt_tokens, 12);
  QCOMPARE(kv.prefix_queries_tokens(), 15u + 17u);
  QCOMPARE(kv.prefix_hits_tokens(), 12u);
  for (int i = 0; i < 3; ++i) {
    QCOMPARE(kv.block_table(2)[i], kv.block_table(1)[i]);  // shared physical blocks
    QCOMPARE(kv.pool().state(kv.block_table(1)[i]).ref_count, 2);
  }
  // A different first block misses at once: the chain stops at the first miss.
  auto p3 = p2;
  p3[0] = 999;
  QCOMPARE(admit(kv, 3, p3), 0);
  // Same tail after a different middle block: only the blocks before the change hit.
  auto p4 = p2;
  p4[5] = 999;
  QCOMPARE(admit(kv, 4, p4), 4);
  kv.validate();
  // Freed blocks stay cached (evictable) and hit again.
  kv.free(1);
  kv.free(2);
  kv.validate();
  QCOMPARE(kv.peek_cached_prefix(p2), 16);  // seq 2's own 4th block (200..203) is cached too
  const auto q = kv.prefix_queries_tokens();
  QCOMPARE(admit(kv, 5, p2), 16);
  QCOMPARE(kv.prefix_queries_tokens(), q + 17);
  kv.validate();
}

// Sequence 2 recomputes sequence 1's first two blocks (its hit was cut short, as a hybrid
// model's state checkpoints do) and caches copies of them: the lookup must still reach
// sequence 1's third block through either copy, and sequence 2's own third block too.
void TestKvCache::duplicate_chains_keep_their_continuations() {
  KvCacheManager kv(small_cfg(4, 32));
  const auto shared = iota_tokens(8, 1);
  const auto p1 = concat(shared, iota_tokens(4, 100)), p2 = concat(shared, iota_tokens(4, 200));
  QCOMPARE(admit(kv, 1, p1), 0);
  QCOMPARE(kv.attach_cached_prefix(2, std::span(p2).first(1)), 0);  // the cut: no hit
  QVERIFY(kv.allocate_slots(2, p2, static_cast<int32_t>(p2.size())));
  kv.free(1);
  kv.free(2);
  QCOMPARE(kv.peek_cached_prefix(concat(p1, {7})), 12);
  QCOMPARE(kv.peek_cached_prefix(concat(p2, {7})), 12);
  QCOMPARE(kv.peek_cached_prefix(concat(shared, {7})), 8);
  auto other = concat(p1, {7});
  other[2] += 1;  // the same hashes' search, another first block: no hit at all
  QCOMPARE(kv.peek_cached_prefix(other), 0);
  kv.validate();
}

void TestKvCache::last_prompt_token_is_never_a_hit() {
  KvCacheManager kv(small_cfg(4, 8));
  const auto p = iota_tokens(8);  // exactly 2 full blocks
  QCOMPARE(admit(kv, 1, p), 0);
  // The same prompt again: block 1 holds the last prompt token, so only block 0 may hit.
  QCOMPARE(kv.peek_cached_prefix(p), 4);
  QCOMPARE(admit(kv, 2, p), 4);
  QCOMPARE(kv.seq_len(2), 8);
  QVERIFY(kv.block_table(2)[1] != kv.block_table(1)[1]);
  const auto one = iota_tokens(4);
  QCOMPARE(kv.peek_cached_prefix(one), 0);  // floor((4 - 1) / 4) = 0 blocks
  QCOMPARE(kv.peek_cached_prefix(iota_tokens(5)), 4);
  kv.validate();
}

void TestKvCache::prefix_caching_off() {
  KvCacheManager kv(small_cfg(4, 8, false));
  const auto p = iota_tokens(10);
  QCOMPARE(admit(kv, 1, p), 0);
  QCOMPARE(admit(kv, 2, p), 0);
  QCOMPARE(kv.prefix_queries_tokens(), 0u);
  QCOMPARE(kv.prefix_hits_tokens(), 0u);
  for (BlockId b = 0; b < 8; ++b) QVERIFY(!kv.pool().state(b).hashed);
  kv.free(1);
  QCOMPARE(kv.pool().num_evictable(), 0);
  kv.validate();
}

void TestKvCache::evictable_blocks_revive_and_evict() {
  KvCacheManager kv(small_cfg(4, 4));
  const auto p = iota_tokens(9);  // 3 blocks, 2 full and cached
  QCOMPARE(admit(kv, 1, p), 0);
  kv.free(1);
  QCOMPARE(kv.pool().num_evictable(), 2);
  QCOMPARE(kv.pool().num_free(), 4);
  // Reviving the 2 cached blocks costs 2 free blocks just like a fresh allocation.
  QVERIFY(kv.can_admit(p, 9));
  QCOMPARE(admit(kv, 2, p), 8);
  QCOMPARE(kv.pool().num_evictable(), 0);
  kv.free(2);
  // A different prompt needing all 4 blocks evicts both cached blocks.
  QCOMPARE(admit(kv, 3, iota_tokens(16, 50)), 0);
  QCOMPARE(kv.pool().counters().evictions, 2u);
  QCOMPARE(kv.peek_cached_prefix(p), 0);
  kv.validate();
}

void TestKvCache::fork_copy_on_write() {
  KvCacheManager kv(small_cfg(4, 8));
  auto toks = iota_tokens(6);  // block 0 full, block 1 holds 2 tokens
  QCOMPARE(admit(kv, 1, toks), 0);
  kv.fork(1, 2);
  QCOMPARE(kv.seq_len(2), 6);
  const BlockId shared_partial = kv.block_table(1)[1];
  QCOMPARE(kv.pool().state(shared_partial).ref_count, 2);
  QCOMPARE(kv.blocks_needed(2, 1), 1);  // the copy
  kv.validate();

  auto child = concat(toks, {77});
  QVERIFY(kv.allocate_slots(2, child, 1));
  const auto copies = kv.take_pending_copies();
  QCOMPARE(copies.size(), size_t(1));
  QCOMPARE(copies[0].src, shared_partial);
  QCOMPARE(copies[0].dst, kv.block_table(2)[1]);
  QCOMPARE(copies[0].n_slots, 2);
  QCOMPARE(kv.block_table(2)[0], kv.block_table(1)[0]);  // the full block stays shared
  QCOMPARE(kv.pool().state(shared_partial).ref_count, 1);
  QCOMPARE(kv.slot(2, 6), int64_t(copies[0].dst) * 4 + 2);
  QVERIFY(kv.take_pending_copies().empty());
  // The parent now owns its partial block alone: it appends in place, no copy.
  QVERIFY(kv.allocate_slots(1, concat(toks, {88}), 1));
  QVERIFY(kv.take_pending_copies().empty());
  QCOMPARE(kv.block_table(1)[1], shared_partial);
  kv.validate();
  kv.free(1);
  kv.free(2);
  QCOMPARE(kv.pool().num_used(), 0);
  kv.validate();
}

void TestKvCache::sliding_window_bounds_blocks() {
  for (int32_t sink : {0, 4}) {
    KvCacheConfig c = small_cfg(4, 64, false);
    c.sliding_window = 16;
    c.sink_tokens = sink;
    KvCacheManager kv(c);
    std::vector<TokenId> toks = iota_tokens(5);
    QVERIFY(kv.allocate_slots(1, toks, 5));
    const int32_t bound = 16 / 4 + 1 + (sink + 3) / 4;
    for (int step = 0; step < 200; ++step) {  // decode 200 tokens
      toks.push_back(1000 + step);
      QVERIFY(kv.allocate_slots(1, toks, 1));
      QVERIFY2(kv.blocks_held(1) <= bound, qPrintable(QString("held %1 > %2").arg(kv.blocks_held(1)).arg(bound)));
      kv.validate();
    }
    QCOMPARE(kv.blocks_held(1), bound);
    QCOMPARE(kv.pool().num_used(), bound);
    const int32_t len = kv.seq_len(1);
    for (int32_t pos = len - 16; pos < len; ++pos) kv.slot(1, pos);  // the window is readable
    QVERIFY_THROWS_EXCEPTION(std::logic_error, kv.slot(1, len - 40));
    if (sink > 0) {
      kv.slot(1, 0);  // sinks stay forever
      QVERIFY(kv.block_table(1)[0] != kNoBlock);
    } else {
      QCOMPARE(kv.block_table(1)[0], kNoBlock);
    }
  }
}

void TestKvCache::sliding_window_with_prefix_cache() {
  KvCacheConfig c = small_cfg(4, 32);
  c.sliding_window = 8;
  c.sink_tokens = 4;
  KvCacheManager kv(c);
  const auto doc = iota_tokens(40);
  // Prefill in chunks of 8 so blocks fall out of the window while the sequence runs.
  for (int32_t len = 0; len < 40; len += 8) QVERIFY(kv.allocate_slots(1, doc, 8));
  kv.validate();
  QCOMPARE(kv.block_table(1)[2], kNoBlock);  // dropped, but still cached-evictable
  QVERIFY(kv.pool().state(kv.block_table(1)[0]).hashed);
  QVERIFY(kv.pool().num_evictable() > 0);

  // Same document + a question: the whole chain hits; only sinks and the window get refs.
  const auto prompt = concat(doc, {500, 501});
  const int32_t cached = kv.attach_cached_prefix(2, prompt);
  QCOMPARE(cached, 40);
  const auto t2 = kv.block_table(2);
  QCOMPARE(int(t2.size()), 10);
  QVERIFY(t2[0] != kNoBlock);                                  // sink block
  for (int bi = 1; bi <= 7; ++bi) QCOMPARE(t2[bi], kNoBlock);  // wholly before position 40 - 8 + 1
  QVERIFY(t2[8] != kNoBlock && t2[9] != kNoBlock);
  QCOMPARE(kv.blocks_held(2), 3);
  QVERIFY(kv.allocate_slots(2, prompt, 2));
  QCOMPARE(kv.slot(2, 39), kv.slot(1, 39));  // the window's K/V come from the shared block
  kv.validate();

  // Evict exactly one cached block: the least recently freed is doc block 1 (dropped first).
  // Its cached descendants (doc blocks 2..9) were computed after it, so the chain ends there:
  // a later prompt hits only the sink block 0. Exactness costs hit rate, never correctness.
  kv.free(1);
  kv.free(2);
  const int32_t truly_free = kv.pool().num_free() - kv.pool().num_evictable();
  const auto other = iota_tokens(4 * (truly_free + 1), 10000);
  QVERIFY(kv.allocate_slots(3, other, static_cast<int32_t>(other.size())));
  QCOMPARE(kv.pool().counters().evictions, 1u);
  QCOMPARE(kv.pool().counters().orphaned, 8u);
  QCOMPARE(kv.peek_cached_prefix(prompt), 4);
  kv.validate();
}

void TestKvCache::failed_allocation_changes_nothing() {
  KvCacheManager kv(small_cfg(4, 3));
  const auto p = iota_tokens(8);
  QCOMPARE(admit(kv, 1, p), 0);
  const auto before = std::vector<BlockId>(kv.block_table(1).begin(), kv.block_table(1).end());
  QVERIFY(!kv.allocate_slots(1, iota_tokens(20), 12));  // needs 3 more, 1 free
  QCOMPARE(kv.seq_len(1), 8);
  QCOMPARE(std::vector<BlockId>(kv.block_table(1).begin(), kv.block_table(1).end()), before);
  QVERIFY(!kv.allocate_slots(2, iota_tokens(9, 70), 9));  // an unknown sequence is not created
  QVERIFY(!kv.has_seq(2));
  QVERIFY(!kv.never_fits(13, 512).empty());
  QVERIFY(kv.never_fits(12, 512).empty());
  kv.validate();
}

// Random admissions, appends, forks, frees and cancels on a small pool, checking every
// invariant after every operation. A shadow "KV memory" stores each slot's token id, written
// the way the engine writes K/V (pending copies first, then the new tokens), so any wrong
// sharing, stale cache hit or missed copy-on-write shows up as a token mismatch.
void TestKvCache::run_property(const KvCacheConfig& cfg, uint32_t seed, int ops) {
  KvCacheManager kv(cfg);
  const int32_t bs = cfg.block_size;
  std::mt19937 rng(seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<TokenId>> prefixes;
  for (int i = 0; i < 3; ++i) prefixes.push_back(iota_tokens(uni(1, 7) * bs + uni(0, bs - 1), 1000 * (i + 1)));
  std::vector<TokenId> memory(static_cast<size_t>(cfg.num_blocks) * bs, -1);
  std::map<SeqId, std::vector<TokenId>> seqs;  // what each live sequence holds
  SeqId next_id = 1;
  uint64_t failures = 0, hits = 0, forks = 0;

  auto write = [&](SeqId id, int32_t from) {
    for (const BlockCopy& c : kv.take_pending_copies())
      for (int32_t i = 0; i < c.n_slots; ++i) memory[c.dst * bs + i] = memory[c.src * bs + i];
    const auto& toks = seqs[id];
    // The chunk's first token (position `from`) reads the sinks and [from - W + 1, from].
    const auto table = kv.block_table(id);
    for (int32_t pos = 0; pos < from; ++pos)
      if (cfg.sliding_window == 0 || pos < cfg.sink_tokens || pos >= from - cfg.sliding_window + 1)
        QVERIFY2(table[pos / bs] != kNoBlock, "a position this chunk reads was dropped");
    for (int32_t pos = from; pos < kv.seq_len(id); ++pos) memory[kv.slot(id, pos)] = toks[pos];
  };
  auto check_memory = [&]() {
    for (const auto& [id, toks] : seqs) {
      const auto table = kv.block_table(id);
      const int32_t len = kv.seq_len(id);
      for (int32_t pos = 0; pos < len; ++pos) {
        // What the next token (position len) reads must be present: the sinks and the window.
        const bool needed = cfg.sliding_window == 0 || pos < cfg.sink_tokens || pos >= len - cfg.sliding_window + 1;
        if (needed) QVERIFY2(table[pos / bs] != kNoBlock, "a position the next token reads was dropped");
        if (table[pos / bs] != kNoBlock) QCOMPARE(memory[kv.slot(id, pos)], toks[pos]);
      }
    }
  };
  auto random_live = [&]() {
    auto it = seqs.begin();
    std::advance(it, uni(0, static_cast<int>(seqs.size()) - 1));
    return it->first;
  };

  for (int op = 0; op < ops; ++op) {
    const int kind = seqs.empty() ? 0 : uni(0, 9);
    if (kind <= 2) {  // admit a new sequence: shared prefix + random tail
      const SeqId id = next_id++;
      std::vector<TokenId> prompt = prefixes[uni(0, 2)];
      const int tail = uni(1, 2 * bs);
      for (int i = 0; i < tail; ++i) prompt.push_back(uni(0, 3));
      const int32_t cached = kv.attach_cached_prefix(id, prompt);
      QVERIFY(cached % bs == 0 && cached < static_cast<int32_t>(prompt.size()));
      hits += cached > 0;
      seqs[id] = prompt;
      if (kv.allocate_slots(id, prompt, static_cast<int32_t>(prompt.size()) - cached)) {
        write(id, cached);
      } else {
        ++failures;
        kv.free(id);
        seqs.erase(id);
      }
    } else if (kind <= 6) {  // append 1..(2 bs) tokens (decode or a chunk)
      const SeqId id = random_live();
      auto& toks = seqs[id];
      const int32_t from = kv.seq_len(id), n = uni(0, 3) == 0 ? uni(2, 2 * bs) : 1;
      for (int i = 0; i < n; ++i) toks.push_back(uni(0, 3));
      if (kv.allocate_slots(id, toks, n)) {
        write(id, from);
      } else {
        ++failures;
        toks.resize(from);
      }
    } else if (kind == 7) {  // fork (parallel sampling / beam)
      const SeqId parent = random_live(), child = next_id++;
      kv.fork(parent, child);
      seqs[child] = seqs[parent];
      ++forks;
    } else {  // finish or cancel: identical for the cache
      const SeqId id = random_live();
      kv.free(id);
      seqs.erase(id);
    }
    kv.validate();
    check_memory();
    if (QTest::currentTestFailed()) {
      qWarning("failed at op %d", op);
      return;
    }
  }
  QVERIFY2(failures > 0, "the pool never ran dry: make it smaller");
  QVERIFY(hits > 0);
  QVERIFY(forks > 0);
  for (const auto& [id, toks] : seqs) kv.free(id);
  kv.validate();
  QCOMPARE(kv.pool().num_used(), 0);
  QCOMPARE(kv.pool().num_free(), cfg.num_blocks);  // every block free or cached-evictable
  for (BlockId b = 0; b < cfg.num_blocks; ++b) QCOMPARE(kv.pool().state(b).ref_count, 0);
}

void TestKvCache::randomized_property_full_attention() { run_property(small_cfg(4, 40), 12345, 6000); }

void TestKvCache::randomized_property_window_and_sinks() {
  KvCacheConfig c = small_cfg(4, 40);
  c.sliding_window = 10;
  c.sink_tokens = 3;
  run_property(c, 777, 6000);
}

QTEST_APPLESS_MAIN(TestKvCache)
#include "test_kv_cache.moc"
