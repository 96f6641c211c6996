#pragma once
// A small persistent pool: parallel_for splits [0, n) into contiguous chunks, one per worker,
// and the calling thread does the first chunk itself. Workers spin briefly then sleep, so a
// decode step (dozens of parallel_for calls) does not pay a wake-up per call.
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
  // fn(begin, end, thread_index) over disjoint chunks covering [0, n); returns when all are done.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t generation_ = 0;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> published_generation_{0};
  bool stop_ = false;
};

}  // namespace kvscope
