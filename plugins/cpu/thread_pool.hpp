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
  // The grain for a weight-streaming loop over n items: two chunks a thread (at least
  // `at_least` items), so each thread reads long contiguous runs of weights, which the hardware
  // prefetchers and DRAM pages reward, and a late thread still leaves the others one chunk to
  // take. Measured (Xeon, 2 threads, decode, against chunks of 4 panels or 64 rows): 12-layer
  // Qwen3-30B-A3B Q4_K_M slice tg32 27.5/27.1 -> 32.2/31.8, Qwen2-0.5B Q4_0 61.6/60.6 ->
  // 66.6/67.6 and Q4_K_M 41.5/43.4 -> 53.1/53.8 (avx2: 39.0/39.9 -> 48.5/47.6); prompts no
  // lower.
  int64_t stream_grain(int64_t n, int64_t at_least) const {
    const int64_t chunks = 2 * int64_t(size()), g = (n + chunks - 1) / chunks;
    return g > at_least ? g : at_least;
  }

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
