#include "thread_pool.hpp"

namespace minfer::cpu {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  start_.notify_all();
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
    pending_ = t - 1;
    error_ = nullptr;
    ++generation_;
  }
  start_.notify_all();
  try {
    f(0, n / t, 0);
  } catch (...) {
    std::lock_guard<std::mutex> lock(m_);
    if (!error_) error_ = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(m_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::work(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)> *job;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(m_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = n_;
    }
    const int t = size();
    try {
      (*job)(n * index / t, n * (index + 1) / t, index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace minfer::cpu
