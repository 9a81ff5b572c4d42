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

// A flag's integer, whole and within [min, max]; else a UsageError naming the flag ("--threads
// takes an integer from 1 to 1024, not 'abc'").
long long parse_int(const std::string &flag, const std::string &value, long long min, long long max);

int cmd_info(const std::vector<std::string> &args);
int cmd_quantize(const std::vector<std::string> &args);
int cmd_synth(const std::vector<std::string> &args);
int cmd_tokenize(const std::vector<std::string> &args);
int cmd_template(const std::vector<std::string> &args);

}  // namespace minfer::tools
