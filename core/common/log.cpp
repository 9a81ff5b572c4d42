#include "common/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/error.hpp"

namespace minfer {

spdlog::level::level_enum parse_log_level(const std::string &name) {
  if (name == "trace") return spdlog::level::trace;
  if (name == "debug") return spdlog::level::debug;
  if (name == "info") return spdlog::level::info;
  if (name == "warn") return spdlog::level::warn;
  if (name == "error") return spdlog::level::err;
  if (name == "off") return spdlog::level::off;
  throw Error("unknown log level '" + name + "'; use one of trace, debug, info, warn, error, off");
}

void init_logging(spdlog::level::level_enum level) {
  auto logger = spdlog::get("minfer");
  if (!logger) {
    logger = spdlog::stderr_color_mt("minfer");
    logger->set_pattern("%^[%l]%$ %v");
    spdlog::set_default_logger(logger);
  }
  spdlog::set_level(level);
}

}  // namespace minfer
