// plugins/cpu/thread_pool.hpp — a fixed set of worker threads for the CPU backend's kernels.
//
// Workers live as long as the backend and spin briefly between jobs before they sleep: a
// decode step is hundreds of small ops, and a condition-variable wake-up per op would cost
// more than the op. run() splits [0, n) into one contiguous range per thread and waits;
// run_dynamic() hands out chunks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minfer::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return int(workers_.size()) + 1; }

  // f(begin, end, thread_index) over [0, n); the calling thread takes the first range.
  // Rethrows the first exception a range threw.
  void run(int64_t n, const std::function<void(int64_t, int64_t, int)> &f);
  // The same, with [0, n) handed out in chunks of `grain` to whichever thread is free: f may
  // be called several times per thread. For long streaming loops, where one thread finishing
  // late (a VM's stolen time, a busier core) would leave the others waiting.
  void run_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)> &f);

 private:
  void work(int index);
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable wake_;
  const std::function<void(int64_t, int64_t, int)> *job_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_m_;
  std::exception_ptr error_;
};

}  // namespace minfer::cpu
