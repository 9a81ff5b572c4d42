// core/config/run_config.hpp — the YAML run config: backends, placement and the job to run.
//
// Errors name the file, line and column, and say what was expected.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace minfer {

struct BackendConfig {
  std::string name;         // the backend's name in placement rules: the plugin's, or any with `plugin`
  std::string plugin;       // key `plugin` naming a plugin (cpu, cuda): several backends of one plugin
  std::string plugin_path;  // key `plugin` as a path (has a '/' or ends in .so): that plugin file
  int32_t device = 0;       // key `device`
  // The plugin this backend opens, by name: `plugin`, else the backend's own name.
  const std::string &plugin_name() const { return plugin.empty() ? name : plugin; }
  std::vector<std::pair<std::string, std::string>> options;  // every other key, for the plugin
};

// The node names of a layer's routed experts (core/models/moe.cpp names them so): the rule
// that 'placement: {experts: NAME}' stands for.
inline constexpr const char *kExpertNodes = "blk.*.ffn_*_exps";

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

// Text generation settings (the run config's `generation` section; CLI flags override).
struct GenerationConfig {
  int32_t n_predict = 128;  // tokens to generate at most
  float temperature = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  int32_t top_k = 40, repeat_last_n = 64;  // repeat_last_n -1: the whole sequence
  uint64_t seed = 42;
  std::vector<std::string> stop;  // stop when the text ends with one of these
  // The reply held to a GBNF grammar (llama.cpp's syntax; `grammar_file` reads it from a file)
  // or to a JSON Schema (JSON text), by constrained decoding; at most one of them. minfer-app's
  // runs; the server takes them per request.
  std::string grammar, json_schema;
  // The other samplers (sampling::Config's meanings), off by default; the server's defaults too.
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, typical_p = 1.0f, top_n_sigma = -1.0f;
  float xtc_probability = 0.0f, xtc_threshold = 0.1f, dry_multiplier = 0.0f, dry_base = 1.75f;
  int32_t dry_allowed_length = 2, dry_penalty_last_n = -1, mirostat = 0;
  float mirostat_tau = 5.0f, mirostat_eta = 0.1f;
  std::vector<std::string> dry_sequence_breakers{"\n", ":", "\"", "*"};
};

// minfer-server's settings (the run config's `server` section; its flags override).
struct ServerConfig {
  std::string host = "127.0.0.1";
  int32_t port = 8080;       // 0: any free port
  std::string api_key;       // empty: none asked (MINFER_API_KEY also sets it)
  int32_t timeout = 600;     // seconds a connection may wait to read or write
  std::string alias;         // the model's name in the API; empty: the file's name
  bool embeddings = false;   // /v1/embeddings: the model is built with its hidden states as an output
  std::vector<std::string> cors_origins;  // web pages' origins allowed to call it (empty: local ones; "*": any)
};

// A model minfer writes itself when `model` does not exist yet (see minfer-gguf synth).
struct SynthesizeConfig {
  bool enabled = false;
  std::string arch = "qwen2", preset = "tiny", type = "q8_0", vocab;
  uint64_t seed = 1;
};

// One turn of a scripted conversation (the run config's `messages:`).
struct ChatMessage {
  std::string role, content;
};

struct RunConfig {
  std::string source;      // the file it came from
  std::string plugin_dir;  // absolute, or relative to the config file's folder
  std::vector<BackendConfig> backends;
  std::string default_backend;
  std::vector<PlacementRule> rules;
  // placement `split: layer` (the layers divided in order among `devices`, llama.cpp's
  // --split-mode layer) or `split: tensor` (each layer's heads and FFN divided among them,
  // partial sums added by an all-reduce); "" = neither.
  std::string split;
  std::vector<std::string> split_devices;  // `devices`: backend names, rank order
  // Ranks the model's graph is built for (models::BuildOptions::tensor_parallel): the devices
  // of split: tensor, else 0 (not divided).
  int32_t tensor_ranks() const { return split == "tensor" ? int32_t(split_devices.size()) : 0; }
  std::string log_level;  // empty = the app's default
  std::string job = "demo";  // "generate" when a model is given, else "demo"
  DemoConfig demo;

  // job: generate
  std::string model;               // GGUF path (relative to the working directory)
  SynthesizeConfig synthesize;
  std::string prompt, prompt_file, system;
  std::vector<std::string> prompts;  // run together (continuous batching); also --prompt-file's lines
  int64_t parallel = 0;            // sequences at once; 0 = min(prompts, 16)
  int64_t kv_pages = 0;            // KV pool pages per layer; 0 = sized by the devices' free memory
  int64_t kv_page_size = 16;       // positions per KV page
  bool chat = false;               // render system, messages and the prompt through the chat template
  std::string chat_template;       // a .jinja file or the template text; empty = the model's own
  std::vector<ChatMessage> messages;  // a scripted conversation before the prompt
  int64_t context = 0;             // KV cache positions; 0 (absent) = min(training context, 4096)
  int64_t batch = 512;             // most tokens per step
  std::string kv_type = "f16";     // f16 or f32
  GenerationConfig generation;
  ServerConfig server;             // minfer-server only; `parallel` and `context` serve it too
  std::string trace;               // write a trace of the run here (MINFER_TRACE also sets it)

  const BackendConfig *backend(const std::string &name) const;
};

// The rules the generation settings follow, one place for the YAML reader and the command
// line alike: calls fail(key, what is wrong) for the first setting that breaks one (the
// caller's fail throws, naming the YAML position or the flag).
void check_generation(const GenerationConfig &g, const std::function<void(const std::string &key, const std::string &what)> &fail);

// Reads and validates a run config; throws minfer::Error with file:line:col context.
RunConfig load_run_config(const std::string &path);
RunConfig parse_run_config(const std::string &yaml_text, const std::string &source_name);

}  // namespace minfer
