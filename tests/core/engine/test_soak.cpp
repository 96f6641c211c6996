// Seeded soak of the engine on stories260K: thousands of requests of random lengths with shared
// prefixes, random cancels, parallel samples, invalid requests, and an engine rebuilt with
// different settings (block size, a pool small enough to force preemption, prefix caching,
// sliding window and sinks, every KV dtype) between runs and sometimes in the middle of one.
//
// After every step: KvCacheManager::validate() holds and the snapshot's block counts add up.
// After every run: every block is free or cached-evictable, no request is lost (each one is
// Finished, Cancelled, or Rejected with a reason), and the KV manager holds no sequence.
// Across cycles (the same seeded runs repeated): resident memory does not grow.
//
// The CI version runs in well under a minute. scripts/soak.sh runs the long version through the
// same code with KVSCOPE_SOAK_* variables and writes a JSON report:
//   KVSCOPE_SOAK_SEED (1)  KVSCOPE_SOAK_CYCLES (3)  KVSCOPE_SOAK_RUNS (per cycle, 8)
//   KVSCOPE_SOAK_REQUESTS (per run, 100; 25 under ASan/TSan)  KVSCOPE_SOAK_REPORT (JSON path, none)
//   KVSCOPE_SOAK_STRICT (0; 1 counts orphaned parallel samples as lost, see finish_checks)
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "test_support.h"

using namespace kvscope;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // quarantine and shadow memory make RSS meaningless
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

std::shared_ptr<Model> stories() {
  static std::shared_ptr<Model> m = Model::load((test::models_dir() / "stories260K.gguf").string());
  return m;
}

int64_t env_int(const char* name, int64_t def) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : def;
}

int64_t rss_kib() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

struct Totals {
  uint64_t runs = 0, refused_configs = 0, rebuilds_mid_run = 0;
  uint64_t requests = 0, finished = 0, cancelled = 0, rejected = 0, lost = 0;
  uint64_t steps = 0, validations = 0, preemptions = 0, evictions = 0, prefix_hits_tokens = 0;
  uint64_t tokens_decoded = 0, tokens_prefilled = 0, parallel_groups = 0, orphaned_samples = 0;
  std::vector<std::string> violations;  // empty when every invariant held
  std::map<std::string, uint64_t> runs_per_dtype;
  void violation(const std::string& what) {
    if (violations.size() < 20)
      violations.push_back(what);
    else if (violations.size() == 20)
      violations.push_back("... (more)");
  }
};

// One engine, one seeded workload: returns when every request is resolved.
class SoakRun {
 public:
  // Run `index` of a cycle: its KV dtype and window come round-robin (so a few runs cover them
  // all), everything else from the seed.
  SoakRun(uint64_t seed, int index, int n_requests, Totals& totals)
      : rng_(seed),
        index_(index),
        n_requests_(n_requests),
        T_(totals),
        strict_(env_int("KVSCOPE_SOAK_STRICT", 0) != 0) {}

  void run() {
    pick_config();
    std::unique_ptr<Engine> e;
    try {
      auto m = stories();
      e = std::make_unique<Engine>(m, std::make_unique<CpuBackend>(m, 2), cfg_);
    } catch (const std::invalid_argument& ex) {
      // Only combinations the engine documents as invalid may be refused.
      ++T_.refused_configs;
      if (std::string(ex.what()).empty()) T_.violation("engine refused a config without a reason");
      return;
    }
    ++T_.runs;
    ++T_.runs_per_dtype[kv_dtype_name(cfg_.kv_dtype)];
    make_prefixes();
    // Some runs are cut short by a settings change: in-flight work is cancelled, the engine dropped.
    const int64_t rebuild_at = coin(0.25) ? uniform(20, 400) : -1;
    int64_t step = 0;
    int target_in_flight = static_cast<int>(uniform(1, 24));
    while (true) {
      if (coin(0.02)) target_in_flight = static_cast<int>(uniform(1, 24));
      while (submitted_ < n_requests_ && static_cast<int>(unresolved_.size()) < target_in_flight &&
             !parallel_pending(*e))
        submit_one(*e);
      if (coin(0.04) && !ids_.empty()) cancel_one(*e);
      const bool worked = e->step();
      ++step;
      ++T_.steps;
      check_step(*e);
      resolve(*e);
      if (step == rebuild_at) {
        ++T_.rebuilds_mid_run;
        for (SeqId id : std::vector<SeqId>(unresolved_.begin(), unresolved_.end())) e->cancel(id);
        resolve(*e);
        break;
      }
      if (!worked && submitted_ >= n_requests_) break;
      if (step > 200000) {
        T_.violation("run did not finish in 200000 steps (hang?)");
        break;
      }
    }
    finish_checks(*e);
  }

 private:
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T, size_t N>
  T pick(const T (&a)[N]) {
    return a[static_cast<size_t>(uniform(0, N - 1))];
  }

  void pick_config() {
    static constexpr int32_t kBlockSizes[] = {8, 16, 32, 64, 128};
    static constexpr int32_t kWindows[] = {0, 32, 64};
    static constexpr int32_t kLens[] = {128, 256};
    static constexpr int32_t kBudgets[] = {16, 64, 256};
    cfg_.block_size = pick(kBlockSizes);
    cfg_.sched.max_model_len = pick(kLens);
    cfg_.sched.max_running = static_cast<int32_t>(uniform(1, 16));
    cfg_.sched.max_batched_tokens = pick(kBudgets);
    cfg_.prefix_caching = coin(0.6);
    cfg_.window = kWindows[static_cast<size_t>(index_ / 2) % std::size(kWindows)];
    cfg_.sinks = cfg_.window > 0 && coin(0.5) ? 4 : 0;
    cfg_.kv_dtype = kAllKvDtypes[static_cast<size_t>(index_) % std::size(kAllKvDtypes)];
    // Enough blocks for one sequence of max_model_len (or nothing would ever run), and at most
    // three times that: several sequences at once exhaust the pool and force preemption.
    const int32_t one = (cfg_.sched.max_model_len + cfg_.block_size - 1) / cfg_.block_size + 1;
    cfg_.num_blocks = static_cast<int32_t>(uniform(one, 3 * one));
  }

  void make_prefixes() {
    const Tokenizer& tok = *stories()->tokenizer;
    const char* texts[] = {"Once upon a time, there was a little girl named Lily. She loved to play outside.",
                           "One day, a big dog came to the park. The dog was very happy and wanted to play.",
                           "Tom and Sam were best friends. They liked to build things with blocks and sticks.",
                           "The sun was shining and the birds were singing in the tall green trees."};
    prefixes_.clear();
    for (const char* t : texts) {
      auto ids = tok.encode(t, true, false);
      ids.resize(std::min<size_t>(ids.size(), static_cast<size_t>(uniform(8, 60))));
      prefixes_.push_back(ids);
    }
  }

  Request make_request() {
    const int32_t V = stories()->config.n_vocab;
    const int32_t L = cfg_.sched.max_model_len;
    Request r;
    r.max_new_tokens = static_cast<int32_t>(uniform(1, 48));
    r.ignore_eos = coin(0.7);
    if (coin(0.5)) {
      r.sampling.temperature = static_cast<float>(uniform(5, 12)) / 10.0f;
      r.sampling.top_k = coin(0.5) ? static_cast<int32_t>(uniform(1, 40)) : 0;
      r.sampling.top_p = coin(0.3) ? 0.9f : 1.0f;
      r.sampling.seed = static_cast<uint64_t>(uniform(0, 1 << 30));
    }
    const double kind = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (kind < 0.01) {
      expect_reject_.insert(static_cast<SeqId>(-1));  // marker consumed in submit_one
      return r;                                       // empty prompt
    }
    if (kind < 0.02) {
      r.prompt = {1, V + 5};  // outside the vocabulary
      expect_reject_.insert(static_cast<SeqId>(-1));
      return r;
    }
    if (kind < 0.03) {
      r.prompt.assign(static_cast<size_t>(L + uniform(0, 40)), 300);  // longer than the context
      expect_reject_.insert(static_cast<SeqId>(-1));
      return r;
    }
    if (kind < 0.65) {
      r.prompt = prefixes_[static_cast<size_t>(uniform(0, prefixes_.size() - 1))];
      const int64_t extra = uniform(0, 40);
      for (int64_t i = 0; i < extra; ++i) r.prompt.push_back(static_cast<TokenId>(uniform(3, V - 1)));
    } else {
      r.prompt.push_back(1);
      const int64_t n = uniform(0, std::min<int64_t>(200, L - 2));
      for (int64_t i = 0; i < n; ++i) r.prompt.push_back(static_cast<TokenId>(uniform(3, V - 1)));
    }
    if (static_cast<int32_t>(r.prompt.size()) >= L) r.prompt.resize(static_cast<size_t>(L - 1));
    return r;
  }

  // submit_parallel predicts its children's ids as the next ids the engine will hand out, and
  // creates the children only when the parent's prompt is computed: a submit() or a cancel of the
  // parent in between loses or mislabels them (reported; see docs/testing.md's reliability section).
  // Until that is fixed the soak holds other submissions while a parent waits for its fork.
  bool parallel_pending(const Engine& e) const {
    if (pending_parent_ == 0) return false;
    const Sequence& p = e.sequence(pending_parent_);
    return !p.is_finished() && p.output_tokens().empty();
  }

  void submit_one(Engine& e) {
    Request r = make_request();
    const bool bad = expect_reject_.erase(static_cast<SeqId>(-1)) > 0;
    ++submitted_;
    if (!bad && coin(0.05)) {
      const auto group = e.submit_parallel(r, static_cast<int>(uniform(2, 3)));
      ++T_.parallel_groups;
      pending_parent_ = group[0];
      for (SeqId id : group) track(id, r);
      for (size_t i = 1; i < group.size(); ++i) parent_of_[group[i]] = group[0];
      return;
    }
    const SeqId id = e.submit(r);
    track(id, r);
    if (bad) expect_reject_.insert(id);
  }

  void track(SeqId id, const Request& r) {
    ids_.push_back(id);
    unresolved_.insert(id);
    max_new_[id] = r.max_new_tokens;
    ++T_.requests;
  }

  void cancel_one(Engine& e) {
    const SeqId id = ids_[static_cast<size_t>(uniform(0, ids_.size() - 1))];
    if (parallel_pending(e) && id == pending_parent_) return;  // see parallel_pending()
    try {
      (void)e.sequence(id);
    } catch (const std::out_of_range&) {
      return;  // a parallel child not forked yet, or pruned long after finishing
    }
    e.cancel(id);  // any state: cancelling a finished request is a no-op
  }

  void check_step(const Engine& e) {
    try {
      e.paged_kv()->validate();
      ++T_.validations;
    } catch (const std::exception& ex) { T_.violation(std::string("validate() after step: ") + ex.what()); }
    const SnapshotPtr s = e.snapshot();
    const MemorySnap& m = s->memory;
    if (m.blocks_used + m.blocks_cached + m.blocks_free != m.blocks_total || m.blocks_total != cfg_.num_blocks)
      T_.violation("snapshot block counts do not add up");
    if (!cfg_.prefix_caching && m.blocks_cached != 0) T_.violation("cached blocks with prefix caching off");
  }

  void resolve(const Engine& e) {
    for (auto it = unresolved_.begin(); it != unresolved_.end();) {
      const SeqId id = *it;
      const Sequence* s = nullptr;
      try {
        s = &e.sequence(id);
      } catch (const std::out_of_range&) {
        ++it;  // a parallel child not forked yet
        continue;
      }
      if (!s->is_finished()) {
        ++it;
        continue;
      }
      const int32_t L = cfg_.sched.max_model_len;
      switch (s->state) {
        case SeqState::Finished: {
          ++T_.finished;
          const int32_t n = static_cast<int32_t>(s->output().size());
          const bool eos = n > 0 && stories()->tokenizer->is_eog(s->output().back());
          if (n > max_new_[id] || (n < max_new_[id] && !eos && s->total_len() < L))
            T_.violation("request " + std::to_string(id) + " finished with " + std::to_string(n) + " of " +
                         std::to_string(max_new_[id]) + " tokens, no EOS, below the context");
          if (expect_reject_.count(id)) T_.violation("invalid request " + std::to_string(id) + " was not rejected");
          break;
        }
        case SeqState::Cancelled:
          ++T_.cancelled;
          break;
        case SeqState::Rejected:
          ++T_.rejected;
          if (s->error.empty()) T_.violation("request " + std::to_string(id) + " rejected without a reason");
          break;
        default:
          break;
      }
      for (TokenId t : s->output())
        if (t < 0 || t >= stories()->config.n_vocab) T_.violation("generated id outside the vocabulary");
      it = unresolved_.erase(it);
    }
  }

  void finish_checks(const Engine& e) {
    for (SeqId id : unresolved_) {
      std::string why;
      if (auto p = parent_of_.find(id); p != parent_of_.end()) {
        const Sequence& ps = e.sequence(p->second);
        why = ", a parallel sample of " + std::to_string(p->second) + " which ended " + seq_state_name(ps.state) +
              " with " + std::to_string(ps.output_tokens().size()) + " tokens" +
              (ps.error.empty() ? "" : " (" + ps.error + ")");
        // KNOWN ENGINE BUG (reported): submit_parallel's samples are created only when the
        // parent's prompt is computed, so a parent cancelled or rejected before that leaves ids
        // that never exist. Counted apart until fixed; KVSCOPE_SOAK_STRICT=1 makes it a violation.
        if (!strict_ && ps.is_finished() && ps.output_tokens().empty()) {
          ++T_.orphaned_samples;
          continue;
        }
      }
      ++T_.lost;
      T_.violation("request " + std::to_string(id) + " lost (never finished, cancelled or rejected)" + why);
    }
    const SnapshotPtr s = e.snapshot();
    if (s->memory.blocks_used != 0)
      T_.violation("after the run " + std::to_string(s->memory.blocks_used) + " blocks are still used");
    if (!e.paged_kv()->sequences().empty()) T_.violation("the KV manager still holds sequences after the run");
    if (e.has_work()) T_.violation("the engine still has work after the run");
    T_.preemptions += s->counters.preemptions;
    T_.evictions += s->counters.evictions;
    T_.prefix_hits_tokens += s->counters.prefix_hits_tokens;
    T_.tokens_decoded += s->counters.tokens_decoded;
    T_.tokens_prefilled += s->counters.tokens_prefilled;
  }

  std::mt19937_64 rng_;
  int index_;
  int n_requests_;
  Totals& T_;
  bool strict_;
  EngineConfig cfg_;
  std::vector<std::vector<TokenId>> prefixes_;
  int submitted_ = 0;
  std::vector<SeqId> ids_;
  std::set<SeqId> unresolved_;
  std::set<SeqId> expect_reject_;
  std::map<SeqId, int32_t> max_new_;
  SeqId pending_parent_ = 0;
  std::map<SeqId, SeqId> parent_of_;  // parallel sample -> its parent
};

}  // namespace

class TestSoak : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf"); }

  void seeded_soak() {
    const uint64_t seed = static_cast<uint64_t>(env_int("KVSCOPE_SOAK_SEED", 1));
    const int cycles = static_cast<int>(env_int("KVSCOPE_SOAK_CYCLES", 3));
    const int runs = static_cast<int>(env_int("KVSCOPE_SOAK_RUNS", 8));
    // Sanitized builds run 5-15x slower: a quarter of the requests keeps them within minutes.
    const int requests = static_cast<int>(env_int("KVSCOPE_SOAK_REQUESTS", kSanitized ? 25 : 100));
    const char* report = std::getenv("KVSCOPE_SOAK_REPORT");
    QVERIFY(cycles >= 2 && runs >= 1 && requests >= 1);
    (void)stories();  // loaded before the first RSS reading

    Totals T;
    std::vector<int64_t> rss;  // after each cycle
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < cycles; ++c) {
      // The same runs every cycle: a leak shows as growth from one cycle to the next.
      for (int r = 0; r < runs; ++r) SoakRun(seed * 1000003u + static_cast<uint64_t>(r), r, requests, T).run();
      rss.push_back(rss_kib());
      qInfo("cycle %d: %llu requests, %llu steps so far, RSS %lld KiB", c, static_cast<unsigned long long>(T.requests),
            static_cast<unsigned long long>(T.steps), static_cast<long long>(rss.back()));
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Growth after the warm-up cycle (allocator pools, lazily built tables): a small bound.
    const int64_t growth = rss.back() - rss[1 < rss.size() ? 1 : 0];
    const int64_t bound_kib = 8 * 1024;

    nlohmann::json j;
    j["seed"] = seed;
    j["cycles"] = cycles;
    j["runs_per_cycle"] = runs;
    j["requests_per_run"] = requests;
    j["seconds"] = secs;
    j["engine_runs"] = T.runs;
    j["refused_configs"] = T.refused_configs;
    j["rebuilds_mid_run"] = T.rebuilds_mid_run;
    j["requests"] = T.requests;
    j["finished"] = T.finished;
    j["cancelled"] = T.cancelled;
    j["rejected"] = T.rejected;
    j["lost"] = T.lost;
    j["orphaned_parallel_samples"] = T.orphaned_samples;  // known engine bug, see finish_checks()
    j["parallel_groups"] = T.parallel_groups;
    j["steps"] = T.steps;
    j["validations"] = T.validations;
    j["preemptions"] = T.preemptions;
    j["evictions"] = T.evictions;
    j["prefix_hits_tokens"] = T.prefix_hits_tokens;
    j["tokens_decoded"] = T.tokens_decoded;
    j["tokens_prefilled"] = T.tokens_prefilled;
    j["runs_per_kv_dtype"] = T.runs_per_dtype;
    j["rss_kib_per_cycle"] = rss;
    j["rss_growth_kib_after_warmup"] = growth;
    j["rss_checked"] = !kSanitized;
    j["invariant_violations"] = T.violations;
    const std::string summary = j.dump();
    qInfo("%s", summary.c_str());
    if (report) std::ofstream(report) << j.dump(2) << "\n";

    for (const auto& v : T.violations) qWarning("%s", v.c_str());
    QVERIFY2(T.violations.empty(), T.violations.empty() ? "" : T.violations.front().c_str());
    QCOMPARE(T.lost, uint64_t(0));
    QCOMPARE(T.finished + T.cancelled + T.rejected + T.orphaned_samples, T.requests);
    if (T.orphaned_samples)
      qWarning("KNOWN ENGINE BUG: %llu parallel samples never existed (parent ended before its fork)",
               static_cast<unsigned long long>(T.orphaned_samples));
    QVERIFY2(T.preemptions > 0, "the pools were meant to run out");
    QVERIFY2(T.cancelled > 0 && T.rejected > 0, "the workload was meant to cancel and reject");
    if (!kSanitized) QVERIFY2(growth <= bound_kib, qPrintable(QString("RSS grew by %1 KiB after warm-up").arg(growth)));
  }
};

QTEST_GUILESS_MAIN(TestSoak)
#include "test_soak.moc"
