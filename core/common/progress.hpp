// core/common/progress.hpp — a one-line progress bar on stderr (silent when not a terminal,
// except for the final line, so logs stay readable).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace minfer {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(isatty(2) != 0) {}

  void update(double fraction, const std::string &item = "") {
    const auto now = std::chrono::steady_clock::now();
    if (!tty_ || (fraction < 1.0 && now - last_ < std::chrono::milliseconds(100))) return;
    last_ = now;
    const int width = 30, filled = int(fraction * width + 0.5);
    std::string bar(size_t(filled), '=');
    if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
    std::fprintf(stderr, "\r%s [%s] %3d%% %-40.40s", label_.c_str(), bar.c_str(), int(fraction * 100 + 0.5), item.c_str());
    std::fflush(stderr);
  }

  void done(const std::string &summary) {
    if (tty_) std::fprintf(stderr, "\r%*s\r", 120, "");
    std::fprintf(stderr, "%s: %s\n", label_.c_str(), summary.c_str());
  }

 private:
  std::string label_;
  bool tty_;
  std::chrono::steady_clock::time_point last_{};
};

inline std::string human_bytes(uint64_t b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

}  // namespace minfer
