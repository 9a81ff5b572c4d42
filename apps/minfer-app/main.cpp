// apps/minfer-app/main.cpp — `minfer-app --config run.yaml`: the main job, plus backend listing
// and the placement report.
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/flags.hpp"
#include "common/log.hpp"
#include "config/run_config.hpp"
#include "demo_job.hpp"
#include "generate_job.hpp"
#include "runtime/placement.hpp"
#include "runtime/plugin.hpp"
#include "runtime/session.hpp"

namespace {

const char *kUsage =
    "usage: minfer-app --config FILE [options]\n"
    "       minfer-app --list-backends [--config FILE] [--plugin-dir DIR]\n"
    "\n"
    "  --config FILE        run config (YAML): model, backends, placement, generation\n"
    "  -m, --model FILE     GGUF model (overrides the config's 'model')\n"
    "  -p, --prompt TEXT    prompt (overrides 'prompt' and 'prompt_file')\n"
    "  -f, --file FILE      prompt file (the whole file is one prompt)\n"
    "  --prompt-file FILE   many prompts, one per line (blank lines skipped), run together\n"
    "  -np, --parallel N    sequences at once for 'prompts:' or --prompt-file (default: min(prompts, 16))\n"
    "  -n N                 tokens to generate\n"
    "  --temp T             temperature (0 = greedy)\n"
    "  --seed N             sampling seed\n"
    "  --grammar GBNF       hold the reply to a grammar (llama.cpp's GBNF; --grammar-file FILE reads one)\n"
    "  -j, --json-schema S  hold the reply to a JSON Schema (JSON text)\n"
    "  --threads N          CPU threads (the cpu backend's 'threads' option)\n"
    "  --json               print one JSON object (prompt_tokens, tokens, text, token ids, timings, peak_rss_mb);\n"
    "                       with many prompts, one object per line in input order (index, prompt, text, counts, stop)\n"
    "  -i, --interactive    chat through the model's template (also -cnv): a line per message (a trailing \\\n"
    "                       continues it), /clear starts over, Ctrl-D ends; the KV cache is kept between turns\n"
    "  --explain            print the placement report (node -> backend, copies, memory) and exit\n"
    "  --list-backends      list every plugin found: name, version, ABI, devices\n"
    "  --plugin-dir DIR     look for plugins here first (overrides the config's plugin_dir)\n"
    "  --log-level LEVEL    trace, debug, info, warn (default), error, off\n"
    "  --version            print the version\n";

struct Args {
  std::string config, plugin_dir, log_level, model, prompt, prompt_file, prompt_lines, parallel, n_predict, temp, seed, threads;
  std::string grammar, grammar_file, json_schema;
  bool explain = false, list_backends = false, json = false, have_prompt = false, interactive = false;
  bool n_predict_set = false, temp_set = false, seed_set = false, threads_set = false;  // given, even as "" (an error then)
};

Args parse_args(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char *flag) -> std::string {
      if (i + 1 >= argc) throw minfer::Error(std::string(flag) + " needs a value\n" + kUsage);
      return argv[++i];
    };
    if (arg == "--config" || arg == "-c") a.config = value("--config");
    else if (arg == "--plugin-dir") a.plugin_dir = value("--plugin-dir");
    else if (arg == "--log-level") a.log_level = value("--log-level");
    else if (arg == "--explain") a.explain = true;
    else if (arg == "--json") a.json = true;
    else if (arg == "--interactive" || arg == "-i" || arg == "-cnv" || arg == "--conversation") a.interactive = true;
    else if (arg == "-m" || arg == "--model") a.model = value("--model");
    else if (arg == "-p" || arg == "--prompt") a.prompt = value("--prompt"), a.have_prompt = true;
    else if (arg == "-f" || arg == "--file") a.prompt_file = value("--file");
    else if (arg == "--prompt-file") a.prompt_lines = value("--prompt-file");
    else if (arg == "-np" || arg == "--parallel") a.parallel = value("--parallel");
    else if (arg == "-n" || arg == "--n-predict") a.n_predict = value("-n"), a.n_predict_set = true;
    else if (arg == "--temp") a.temp = value("--temp"), a.temp_set = true;
    else if (arg == "--seed") a.seed = value("--seed"), a.seed_set = true;
    else if (arg == "--grammar") a.grammar = value("--grammar");
    else if (arg == "--grammar-file") a.grammar_file = value("--grammar-file");
    else if (arg == "-j" || arg == "--json-schema") a.json_schema = value("--json-schema");
    else if (arg == "--threads" || arg == "-t") a.threads = value("--threads"), a.threads_set = true;
    else if (arg == "--list-backends") a.list_backends = true;
    else if (arg == "--help" || arg == "-h") { std::fputs(kUsage, stdout); std::exit(0); }
    else if (arg == "--version") { std::printf("minfer %s (plugin ABI %d.%d)\n", MINFER_VERSION, MINFER_ABI_MAJOR, MINFER_ABI_MINOR); std::exit(0); }
    else throw minfer::Error("unknown argument '" + arg + "'\n" + kUsage);
  }
  if (a.config.empty() && !a.list_backends) throw minfer::Error(std::string("no run config: give --config FILE (configs/demo.yaml is one)\n") + kUsage);
  return a;
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", double(b) / (1024.0 * 1024 * 1024));
  return buf;
}

int list_backends(const std::string &plugin_dir) {
  const auto dirs = minfer::plugin_search_dirs(plugin_dir);
  const auto files = minfer::discover_plugin_files(dirs);
  if (files.empty()) {
    std::printf("no plugins found; looked in:\n");
    for (const auto &d : dirs) std::printf("  %s\n", d.c_str());
    return 1;
  }
  for (const auto &f : files) {
    try {
      auto p = minfer::Plugin::load(f);
      std::string why;
      const int32_t n = p->device_count(&why);
      std::printf("%-10s version %-8s ABI %u.%u  %s\n", p->name().c_str(), p->version().c_str(),
                  p->api().abi_major, p->api().abi_minor, f.c_str());
      if (n == 0) std::printf("    no devices: %s\n", why.empty() ? "(no reason given)" : why.c_str());
      for (int32_t d = 0; d < n; ++d) {
        const minfer_device_info info = p->device_info(d);
        std::printf("    device %d: %s", d, info.name);
        if (info.total_bytes) std::printf(", %s total, %s free", gib(info.total_bytes).c_str(), gib(info.free_bytes).c_str());
        std::printf("\n");
      }
    } catch (const std::exception &e) {
      std::printf("%-10s unusable: %s\n", "?", e.what());
    }
  }
  return 0;
}

uint64_t to_seed(const std::string &v) {
  char *end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || v[0] == '+' || *end || errno == ERANGE)
    throw minfer::Error("--seed takes an integer from 0 to 18446744073709551615, not '" + v + "'");
  return x;
}

float to_float(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  const float x = std::strtof(v.c_str(), &end);
  if (v.empty() || *end || !std::isfinite(x)) throw minfer::Error(flag + " takes a finite number, not '" + v + "'");
  return x;
}

// --prompt-file: a prompt per line; blank lines (whitespace only) are skipped.
std::vector<std::string> read_prompt_lines(const std::string &path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw minfer::Error(path + ": --prompt-file names a directory; give a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw minfer::Error(path + ": cannot open the prompt file (--prompt-file)");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    if (line.find_first_not_of(" \t") != std::string::npos) out.push_back(line);
  }
  if (out.empty()) throw minfer::Error(path + ": the prompt file holds no prompts (--prompt-file takes one per line)");
  return out;
}

// Command-line flags win over the run config, and follow its rules (check_generation).
void apply_overrides(const Args &a, minfer::RunConfig &cfg) {
  if (!a.model.empty()) cfg.model = a.model, cfg.job = "generate";
  if (a.have_prompt) cfg.prompt = a.prompt, cfg.prompt_file.clear(), cfg.prompts.clear();
  if (!a.prompt_file.empty()) cfg.prompt_file = a.prompt_file, cfg.prompts.clear();
  if (!a.prompt_lines.empty()) {
    if (a.have_prompt || !a.prompt_file.empty()) throw minfer::Error("--prompt-file runs many prompts; leave out -p and -f beside it");
    cfg.prompts = read_prompt_lines(a.prompt_lines);
    cfg.prompt.clear(), cfg.prompt_file.clear();
  }
  if (!a.parallel.empty()) cfg.parallel = minfer::flag_int("--parallel", a.parallel, 1, 1024);
  if (a.n_predict_set) cfg.generation.n_predict = int32_t(minfer::flag_int("-n", a.n_predict, 0, INT32_MAX));
  if (a.seed_set) cfg.generation.seed = to_seed(a.seed);
  if (a.temp_set) cfg.generation.temperature = to_float("--temp", a.temp);
  if (!a.grammar.empty() && !a.grammar_file.empty()) throw minfer::Error("give --grammar or --grammar-file, not both");
  if (!a.grammar.empty() || !a.grammar_file.empty() || !a.json_schema.empty()) cfg.generation.grammar.clear(), cfg.generation.json_schema.clear();
  if (!a.grammar.empty()) cfg.generation.grammar = a.grammar;
  if (!a.grammar_file.empty()) {
    std::ifstream in(a.grammar_file, std::ios::binary);
    if (!in) throw minfer::Error("--grammar-file: " + a.grammar_file + " cannot be read");
    cfg.generation.grammar.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!a.json_schema.empty()) cfg.generation.json_schema = a.json_schema;
  const std::map<std::string, std::string> flag_of = {{"n_predict", "-n"}, {"temperature", "--temp"},
                                                      {"grammar", a.grammar_file.empty() ? "--grammar" : "--grammar-file"}, {"json_schema", "--json-schema"}};
  minfer::check_generation(cfg.generation, [&](const std::string &key, const std::string &what) {
    const auto f = flag_of.find(key);
    throw minfer::Error((f != flag_of.end() ? f->second : "'" + key + "' in " + cfg.source) + ": " + what);
  });
  if (a.threads_set) {
    minfer::flag_int("--threads", a.threads, 1, 1024);
    bool found = false;
    for (auto &b : cfg.backends)
      if (b.name == "cpu") {
        std::erase_if(b.options, [](const auto &kv) { return kv.first == "threads"; });
        b.options.emplace_back("threads", a.threads);
        found = true;
      }
    if (!found) throw minfer::Error("--threads: the run config has no cpu backend to give threads to");
  }
}

}  // namespace

int main(int argc, char **argv) {
  try {
    minfer::init_logging(spdlog::level::warn);
    const Args args = parse_args(argc, argv);
    if (!args.log_level.empty()) spdlog::set_level(minfer::parse_log_level(args.log_level));

    minfer::RunConfig cfg;
    if (!args.config.empty()) {
      cfg = minfer::load_run_config(args.config);
      if (!args.plugin_dir.empty()) cfg.plugin_dir = args.plugin_dir;
      if (!cfg.log_level.empty() && args.log_level.empty())
        spdlog::set_level(minfer::parse_log_level(cfg.log_level));
    }
    if (args.list_backends) return list_backends(args.config.empty() ? args.plugin_dir : cfg.plugin_dir);
    apply_overrides(args, cfg);
    if (cfg.job == "generate") {
      minfer::app::GenerateOptions go;
      go.json = args.json;
      go.explain = args.explain;
      go.interactive = args.interactive;
      if (go.interactive) cfg.chat = true;
      return minfer::app::run_generate(cfg, go);
    }

    minfer::BackendSet backends = minfer::open_backends(cfg);
    const minfer::Graph graph = minfer::app::build_demo_graph(cfg.demo);
    minfer::Session session(graph, cfg, backends);
    if (args.explain) {
      std::fputs(session.explain().c_str(), stdout);
      return 0;
    }
    return minfer::app::run_demo(session, graph, cfg);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "minfer-app: error: %s\n", e.what());
    return 2;
  }
}
