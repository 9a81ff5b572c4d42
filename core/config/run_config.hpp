// core/config/run_config.hpp — the YAML run config: backends, placement and the job to run.
//
// Errors name the file, line and column, and say what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace minfer {

struct BackendConfig {
  std::string name;         // "cpu", "cuda", or any plugin's name
  std::string plugin_path;  // explicit plugin file (key `plugin`); empty = search by name
  int32_t device = 0;       // key `device`
  std::vector<std::pair<std::string, std::string>> options;  // every other key, for the plugin
};

struct PlacementRule {
  std::string match;    // glob over node names: "blk.*.ffn_*"
  std::string backend;
};

struct DemoConfig {
  std::vector<int32_t> tokens{3, 1, 4, 1, 5};  // rows to gather from the table
  int64_t vocab = 16;                          // table rows
  int64_t dim = 64;                            // table row length
  std::string table_type = "q8_0";             // f32, f16 or q8_0
};

struct RunConfig {
  std::string source;      // the file it came from
  std::string plugin_dir;  // absolute, or relative to the config file's folder
  std::vector<BackendConfig> backends;
  std::string default_backend;
  std::vector<PlacementRule> rules;
  std::string log_level;  // empty = the app's default
  std::string job = "demo";
  DemoConfig demo;

  const BackendConfig *backend(const std::string &name) const;
};

// Reads and validates a run config; throws minfer::Error with file:line:col context.
RunConfig load_run_config(const std::string &path);
RunConfig parse_run_config(const std::string &yaml_text, const std::string &source_name);

}  // namespace minfer
