// tests/cuda_available.hpp — whether the CUDA tests can run on this machine.
#pragma once

#include <string>

#include "common/error.hpp"
#include "runtime/plugin.hpp"

namespace minfer::test {

// Why the CUDA tests cannot run here, for GTEST_SKIP; "" when they can.
inline std::string cuda_unavailable() {
  try {
    const auto plugin = minfer::find_plugin("cuda", "", minfer::plugin_search_dirs(""));
    std::string why;
    return plugin->device_count(&why) == 0 ? "no CUDA device: " + why : "";
  } catch (const minfer::Error &e) {
    return std::string("the CUDA plugin is not built: ") + e.what();
  }
}

}  // namespace minfer::test
