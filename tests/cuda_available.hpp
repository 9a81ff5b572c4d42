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

// Why a test needing `count` CUDA devices cannot run here; "" when it can.
inline std::string cuda_devices_unavailable(int32_t count) {
  try {
    const auto plugin = minfer::find_plugin("cuda", "", minfer::plugin_search_dirs(""));
    std::string why;
    const int32_t n = plugin->device_count(&why);
    return n >= count ? "" : "needs " + std::to_string(count) + " CUDA devices, this machine has " + std::to_string(n) + (why.empty() ? "" : " (" + why + ")");
  } catch (const minfer::Error &e) {
    return std::string("the CUDA plugin is not built: ") + e.what();
  }
}

}  // namespace minfer::test
