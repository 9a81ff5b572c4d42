// core/common/error.hpp — the one exception type the core throws; messages carry their context.
#pragma once

#include <stdexcept>
#include <string>

namespace minfer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

}  // namespace minfer
