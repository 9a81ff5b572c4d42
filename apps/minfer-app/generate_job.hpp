// apps/minfer-app/generate_job.hpp — the main job: load a GGUF model, generate text.
#pragma once

#include "config/run_config.hpp"

namespace minfer::app {

struct GenerateOptions {
  bool json = false;     // one JSON object on stdout instead of streamed text
  bool explain = false;  // print the placement report and stop
};

// Returns the process exit code.
int run_generate(const RunConfig &cfg, const GenerateOptions &opts);

}  // namespace minfer::app
