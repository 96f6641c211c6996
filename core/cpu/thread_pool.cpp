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
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

static void run_chunk(const std::function<void(int64_t, int64_t, int)>& fn, int64_t n, int index, int parts) {
  const int64_t begin = n * index / parts;
  const int64_t end = n * (index + 1) / parts;
  if (begin < end) fn(begin, end, index);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
  }
  cv_.notify_all();
  run_chunk(fn, n, 0, n_threads_);
  // Workers finish within microseconds of us on a balanced split: spin, don't sleep.
  while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little before sleeping: consecutive parallel_for calls come back to back.
    for (int spin = 0; spin < 20000 && published_generation_.load(std::memory_order_acquire) == seen; ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
      job = job_;
      n = job_n_;
    }
    run_chunk(*job, n, index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace kvscope
