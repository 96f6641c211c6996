#pragma once
// A small persistent pool. parallel_for splits [0, n) into chunks that participants claim
// dynamically; the calling thread claims chunks too and only waits for chunks already being
// run. So a worker that is slow to wake (an oversubscribed machine, the UI and engine threads
// sharing two cores) never stalls a step: the caller simply does that work itself.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvscope {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads = 0);  // 0: std::thread::hardware_concurrency()
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // fn(begin, end, participant) over disjoint chunks covering [0, n); participant is in
  // [0, size()) and unique among concurrent calls (for per-thread scratch). Returns when all
  // chunks are done. Not reentrant: one parallel_for at a time per pool.
  // chunks_per_thread: how finely [0, n) is cut for claiming (at most n chunks). More chunks
  // cost one atomic claim each and shorten the wait for the last one, which matters when a
  // participant is descheduled mid-chunk on a busy machine.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int chunks_per_thread = 4);

 private:
  // One parallel_for call. Each participant works from its own copy, taken under mu_, so a
  // worker still finishing generation g never reads the fields of generation g + 1.
  struct Job {
    const std::function<void(int64_t, int64_t, int)>* fn = nullptr;
    int64_t n = 0;
    uint32_t n_chunks = 0;
  };
  void worker_loop(int index);
  // Claims and runs chunks of job `gen` until none are left.
  void run_chunks(uint32_t gen, const Job& job, int participant);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  // The current job. `claim_` packs (generation << 32 | next chunk) so that a worker holding a
  // stale generation can never claim a chunk of a newer job.
  Job job_;  // guarded by mu_
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<uint32_t> generation_{0};
  bool stop_ = false;
};

}  // namespace kvscope
