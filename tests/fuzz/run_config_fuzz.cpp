// libFuzzer target for the run config reader: any text must give a RunConfig or a
// minfer::Error (with its file:line:col) — never a crash, a hang, or another exception type
// (a yaml-cpp or std:: exception would reach the user as an implementation word).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "common/error.hpp"
#include "config/run_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  try {
    const minfer::RunConfig cfg = minfer::parse_run_config(text, "fuzz.yaml");
    if (cfg.backends.empty() || cfg.default_backend.empty()) {
      std::fprintf(stderr, "run_config_fuzz: accepted a config without a backend\n");
      std::abort();
    }
  } catch (const minfer::Error &) {
  } catch (const std::exception &e) {
    std::fprintf(stderr, "run_config_fuzz: an exception that is not a minfer::Error escaped: %s\n", e.what());
    std::abort();
  }
  return 0;
}
