// core/common/flags.hpp — command-line flag values as the tools take them.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/error.hpp"

namespace minfer {

// A flag's integer, whole and within [lo, hi]: "-n 4294967297" must not wrap, "--seed -1" must
// not become 2^64 - 1. Throws minfer::Error naming the flag and the range.
inline long long flag_int(const std::string &flag, const std::string &v, long long lo, long long hi) {
  char *end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE || x < lo || x > hi)
    throw Error(flag + " takes an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not '" + v + "'");
  return x;
}

}  // namespace minfer
