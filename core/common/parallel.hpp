// core/common/parallel.hpp — split [0, n) into `threads` contiguous ranges run in parallel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace minfer {

inline int resolve_threads(int threads) {
  return threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

// f(begin, end) on each range; the first exception is rethrown after all threads joined.
template <class F>
void parallel_ranges(int64_t n, int threads, F &&f) {
  threads = int(std::min<int64_t>(resolve_threads(threads), std::max<int64_t>(n, 1)));
  if (threads <= 1) {
    f(int64_t(0), n);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      try {
        f(n * w / threads, n * (w + 1) / threads);
      } catch (...) {
        errors[size_t(w)] = std::current_exception();
      }
    });
  for (auto &t : pool) t.join();
  for (auto &e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace minfer
