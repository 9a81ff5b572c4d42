// apps/minfer-app/generate_job.hpp — the main job: load a GGUF model, generate text; or keep a
// conversation with it (--interactive).
#pragma once

#include <string>
#include <vector>

#include "chat/chat_template.hpp"
#include "config/run_config.hpp"

namespace minfer::app {

struct GenerateOptions {
  bool json = false;         // one JSON object on stdout instead of streamed text
  bool explain = false;      // print the placement report and stop
  bool interactive = false;  // a conversation: user lines from stdin, answers streamed
};

// Returns the process exit code.
int run_generate(const RunConfig &cfg, const GenerateOptions &opts);
// Many prompts at once (batch_job.cpp): cfg.prompts, cfg.parallel at a time.
int run_batch(const RunConfig &cfg, const GenerateOptions &opts);
// The interactive chat (chat_job.cpp).
int run_chat(const RunConfig &cfg, const GenerateOptions &opts);

// The prompt text of the run config (prompt: or prompt_file:).
std::string read_prompt(const RunConfig &cfg);
// system:, messages: and the user's text as one conversation.
std::vector<chat::Message> conversation(const RunConfig &cfg, const std::string &user);

}  // namespace minfer::app
