#include "cpu/thread_pool.h"

#include <algorithm>

namespace kvscope {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint32_t gen, const Job& job, int participant) {
  for (;;) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    uint32_t idx;
    do {
      if (static_cast<uint32_t>(c >> 32) != gen) return;  // a newer job: ours is finished
      idx = static_cast<uint32_t>(c);
      if (idx >= job.n_chunks) return;
    } while (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel));
    const int64_t begin = job.n * idx / job.n_chunks;
    const int64_t end = job.n * (idx + 1) / job.n_chunks;
    if (begin < end) (*job.fn)(begin, end, participant);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int chunks_per_thread) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  uint32_t gen;
  // A few chunks per thread balances uneven rows without much claiming overhead.
  const Job job{
      &fn, n,
      static_cast<uint32_t>(std::min<int64_t>(n, static_cast<int64_t>(std::max(1, chunks_per_thread)) * n_threads_))};
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
    done_.store(0, std::memory_order_relaxed);
    gen = generation_.load(std::memory_order_relaxed) + 1;
    claim_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  run_chunks(gen, job, 0);
  // Only chunks another thread has already claimed remain; they are running right now.
  while (done_.load(std::memory_order_acquire) != job.n_chunks) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  for (;;) {
    // Spin briefly before sleeping: a decode step issues dozens of parallel_for calls.
    for (int spin = 0; spin < 4000 && generation_.load(std::memory_order_acquire) == seen; ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    uint32_t gen;
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
      gen = generation_.load(std::memory_order_relaxed);
      job = job_;  // this generation's job, read under the lock it was written under
      seen = gen;
      if (stop_) return;
    }
    run_chunks(gen, job, index);
  }
}

}  // namespace kvscope
