// minfer-gguf synth: a seeded synthetic model with a real model's exact shapes.
#include <chrono>
#include <climits>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/progress.hpp"
#include "gguf_commands.hpp"
#include "synth/synth.hpp"

namespace minfer::tools {

int cmd_synth(const std::vector<std::string> &args) {
  synth::Options o;
  bool have_type = false, have_preset = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
      return args[++i];
    };
    if (a == "--arch") o.arch = value();
    else if (a == "--preset") o.preset = value(), have_preset = true;
    else if (a == "--type") o.type = value(), have_type = true;
    else if (a == "--seed") o.seed = uint64_t(parse_int("--seed", value(), 0, INT64_MAX));
    else if (a == "--vocab") o.vocab_path = value();
    else if (a == "--threads") o.threads = int(parse_int("--threads", value(), 1, 1024));
    else if (a == "--layers") o.layers = parse_int("--layers", value(), 1, 1 << 20);
    else if (a == "--chat-template") {
      const std::string file = value();
      std::ifstream in(file, std::ios::binary);
      if (!in) throw Error(file + ": cannot open the chat template");
      std::stringstream ss;
      ss << in.rdbuf();
      o.chat_template = ss.str();
    }
    else if (a == "-o" || a == "--out") o.out = value();
    else throw UsageError("unknown argument '" + a + "'");
  }
  if (!have_preset || !have_type || o.out.empty()) throw UsageError("--preset, --type and -o are required");
  ProgressBar bar("synth");
  o.progress = [&](double f, const std::string &name) { bar.update(f, name); };
  const auto t0 = std::chrono::steady_clock::now();
  const synth::Report r = synth::synthesize(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto &n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s/%s %s seed %llu: %lld tensors, %.1fM params, %s in %.1f s -> %s", o.arch.c_str(),
                o.preset.c_str(), o.type.c_str(), (unsigned long long)o.seed, (long long)r.n_tensors, double(r.n_params) / 1e6,
                human_bytes(r.file_bytes).c_str(), secs, o.out.c_str());
  bar.done(buf + (o.layers ? " (" + std::to_string(o.layers) + " layers)" : std::string()));
  return 0;
}

}  // namespace minfer::tools
