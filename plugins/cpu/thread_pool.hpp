// plugins/cpu/thread_pool.hpp — a fixed set of worker threads for the CPU backend's kernels.
//
// Workers live as long as the backend, so a decode step's few hundred small ops pay no thread
// start-up; run() splits [0, n) into one contiguous range per thread and waits for all.
#pragma once

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

 private:
  void work(int index);
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable start_, done_;
  const std::function<void(int64_t, int64_t, int)> *job_ = nullptr;
  int64_t n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace minfer::cpu
