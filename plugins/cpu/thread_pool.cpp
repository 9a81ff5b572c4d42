#include "thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <immintrin.h>

namespace minfer::cpu {

namespace {
// How long an idle worker spins before sleeping: longer than the gap between two ops of a
// decode step, far shorter than a pause a user would notice as CPU use.
constexpr auto kSpin = std::chrono::microseconds(200);
}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto &t : workers_) t.join();
}

void ThreadPool::run(int64_t n, const std::function<void(int64_t, int64_t, int)> &f) {
  if (n <= 0) return;
  const int t = size();
  if (t == 1 || n == 1) {
    f(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(m_);
    job_ = &f;
    n_ = n;
    error_ = nullptr;
    pending_.store(t - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  try {
    f(0, n / t, 0);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_m_);
    if (!error_) error_ = std::current_exception();
  }
  while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::run_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)> &f) {
  if (n <= 0) return;
  const int t = size();
  if (t == 1 || n <= grain) {
    f(0, n, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  run(t, [&](int64_t, int64_t, int index) {
    for (int64_t i0; (i0 = next.fetch_add(grain, std::memory_order_relaxed)) < n;) f(i0, std::min(n, i0 + grain), index);
  });
}

void ThreadPool::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a new generation, then sleep on the condition variable.
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed) &&
           std::chrono::steady_clock::now() < until)
      _mm_pause();
    if (generation_.load(std::memory_order_acquire) == seen && !stop_) {
      std::unique_lock<std::mutex> lock(m_);
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
    }
    if (stop_) return;
    const std::function<void(int64_t, int64_t, int)> *job;
    int64_t n;
    {
      std::lock_guard<std::mutex> lock(m_);
      seen = generation_.load(std::memory_order_acquire);
      job = job_;
      n = n_;
    }
    const int t = size();
    try {
      (*job)(n * index / t, n * (index + 1) / t, index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_m_);
      if (!error_) error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace minfer::cpu
