// apps/minfer-gguf/gguf_commands.hpp — the subcommands of minfer-gguf.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace minfer::tools {

// A command line that cannot be understood: the tool prints the usage with it.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int cmd_info(const std::vector<std::string> &args);
int cmd_quantize(const std::vector<std::string> &args);
int cmd_synth(const std::vector<std::string> &args);
int cmd_tokenize(const std::vector<std::string> &args);

}  // namespace minfer::tools
