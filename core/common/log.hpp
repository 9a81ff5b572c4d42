// core/common/log.hpp — spdlog set-up shared by the apps and the plugin log bridge.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace minfer {

// Parses "trace|debug|info|warn|error|off"; throws minfer::Error naming the accepted values.
spdlog::level::level_enum parse_log_level(const std::string &name);

// Log to stderr at level (the apps keep stdout for results).
void init_logging(spdlog::level::level_enum level);

}  // namespace minfer
